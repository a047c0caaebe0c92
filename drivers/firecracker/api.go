package firecracker

// Request and response bodies of the Firecracker API (contract: contract/firecracker-api.yaml,
// Swagger 2.0, v1.17). Only the fields the driver sends are modelled; the JSON names are the
// contract's definitions, and optional fields are omitted when zero so the body never carries a
// value the driver did not choose.

// MachineConfig is the contract's MachineConfiguration (PUT /machine-config).
type MachineConfig struct {
	VCPUCount       int  `json:"vcpu_count"`
	MemSizeMiB      int  `json:"mem_size_mib"`
	SMT             bool `json:"smt,omitempty"`
	TrackDirtyPages bool `json:"track_dirty_pages,omitempty"`
}

// BootSource is the contract's BootSource (PUT /boot-source).
type BootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	BootArgs        string `json:"boot_args,omitempty"`
	InitrdPath      string `json:"initrd_path,omitempty"`
}

// Drive is the contract's Drive (PUT /drives/{drive_id}), virtio-block flavour.
type Drive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
}

// NetworkInterface is the contract's NetworkInterface (PUT /network-interfaces/{iface_id}).
type NetworkInterface struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
	GuestMAC    string `json:"guest_mac,omitempty"`
	MTU         int    `json:"mtu,omitempty"`
}

// Vsock is the contract's Vsock (PUT /vsock).
type Vsock struct {
	GuestCID uint32 `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// VMState is the contract's Vm.state (PATCH /vm).
type VMState string

// The states PATCH /vm accepts.
const (
	VMPaused  VMState = "Paused"
	VMResumed VMState = "Resumed"
)

// SnapshotCreate is the contract's SnapshotCreateParams (PUT /snapshot/create). The driver only
// takes Full snapshots.
type SnapshotCreate struct {
	SnapshotPath string `json:"snapshot_path"`
	MemFilePath  string `json:"mem_file_path"`
	SnapshotType string `json:"snapshot_type,omitempty"`
}

// NetworkOverride is the contract's NetworkOverride: the TAP a restored interface uses.
type NetworkOverride struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
}

// VsockOverride is the contract's VsockOverride: the uds_path a restored vsock device uses.
type VsockOverride struct {
	UDSPath string `json:"uds_path"`
}

// SnapshotLoad is the contract's SnapshotLoadParams (PUT /snapshot/load), memory from a file.
type SnapshotLoad struct {
	SnapshotPath     string            `json:"snapshot_path"`
	MemFilePath      string            `json:"mem_file_path"`
	ResumeVM         bool              `json:"resume_vm,omitempty"`
	NetworkOverrides []NetworkOverride `json:"network_overrides,omitempty"`
	VsockOverride    *VsockOverride    `json:"vsock_override,omitempty"`
}

// InstanceState is the contract's InstanceInfo.state.
type InstanceState string

// The states GET / reports.
const (
	StateNotStarted InstanceState = "Not started"
	StateRunning    InstanceState = "Running"
	StatePaused     InstanceState = "Paused"
)

// InstanceInfo is the contract's InstanceInfo (GET /).
type InstanceInfo struct {
	AppName    string        `json:"app_name"`
	ID         string        `json:"id"`
	State      InstanceState `json:"state"`
	VMMVersion string        `json:"vmm_version"`
}

// partialDrive is the contract's PartialDrive (PATCH /drives/{drive_id}).
type partialDrive struct {
	DriveID    string `json:"drive_id"`
	PathOnHost string `json:"path_on_host"`
}

type instanceAction struct {
	ActionType string `json:"action_type"`
}

type vmBody struct {
	State VMState `json:"state"`
}

type apiErrorBody struct {
	FaultMessage string `json:"fault_message"`
}
