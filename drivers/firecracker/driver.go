package firecracker

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Name is the driver's registry name.
const Name = "firecracker"

// Version goes into the stored-plan fingerprint; bump it when behaviour visible to plans changes.
const Version = "0.1.0"

// DefaultStateDir holds one directory per node generation (socket, disk copy, record, log).
const DefaultStateDir = "/run/sysbox/firecracker"

// Guest defaults when the node spec leaves them out.
const (
	defaultVCPUs    = 1
	defaultMemMiB   = 128
	defaultBootArgs = "console=ttyS0 reboot=k panic=1 pci=off"
	rootDriveID     = "rootfs"
	guestCID        = 3
)

// Options configure a Driver.
type Options struct {
	// Binary is the firecracker executable: a path, or a name looked up on PATH when a node
	// process starts (default "firecracker").
	Binary string
	// StateDir holds the node directories (default DefaultStateDir).
	StateDir string
	// ReadyTimeout bounds the wait for a started guest's agent (default DefaultReadyTimeout).
	ReadyTimeout time.Duration
	// NoSnapshots turns the reset fast path off: every generation boots cold.
	NoSnapshots bool
}

// Driver implements the firecracker driver's capabilities. It is safe for concurrent use.
type Driver struct {
	binary       string
	jail         *jailConfig // nil: VMMs run unjailed
	stateDir     string
	readyTimeout time.Duration
	snapshots    bool
	// mu serialises read-modify-write of node records within this process.
	mu sync.Mutex
}

var (
	_ driver.Nodes     = (*Driver)(nil)
	_ driver.NICs      = (*Driver)(nil)
	_ driver.NodeState = (*Driver)(nil)
	_ driver.Resetter  = (*Driver)(nil)
	_ driver.Auditor   = (*Driver)(nil)
	_ driver.GuestExec = (*Driver)(nil)
)

// New returns a driver. It starts nothing.
func New(opts Options) *Driver {
	d := &Driver{binary: opts.Binary, stateDir: opts.StateDir, readyTimeout: opts.ReadyTimeout, snapshots: !opts.NoSnapshots}
	if d.readyTimeout <= 0 {
		d.readyTimeout = DefaultReadyTimeout
	}
	if d.binary == "" {
		d.binary = "firecracker"
	}
	if d.stateDir == "" {
		d.stateDir = DefaultStateDir
	}
	return d
}

// Register adds the driver with its defaults to r.
func Register(r *driver.Registry) error { return r.Register(New(Options{})) }

// Descriptor declares the capabilities below.
func (d *Driver) Descriptor() driver.Descriptor {
	return driver.Descriptor{Name: Name, Version: Version, Capabilities: []driver.Capability{
		driver.CapArtifact, driver.CapNodeLifecycle, driver.CapNIC, driver.CapNodeState, driver.CapReset, driver.CapAudit, driver.CapGuestExec}}
}

// NodeName is the node generation's name: its directory, the VMM's --id, the handle's external
// id. Names are derived, never proof: the record's marker is.
func NodeName(o substrate.Owner) string {
	return "fc-" + o.ShortID(10) + "-g" + strconv.FormatUint(o.Generation, 10)
}

func (d *Driver) nodeDir(name string) string { return filepath.Join(d.stateDir, name) }

// Files of a node directory.
const (
	recordFile = "node.json"
	apiSock    = "api.sock"
	vsockFile  = "v.sock"
	rootfsFile = "rootfs.img"
	logFile    = "firecracker.log"
)

// nodeRecord is the durable record in the node's directory: the ownership marker, the VMM
// process identity and everything needed to configure a fresh VMM process again.
type nodeRecord struct {
	Name       string               `json:"name"`
	Marker     string               `json:"marker"`
	PID        int                  `json:"pid"`
	StartTime  uint64               `json:"start_time"` // /proc/PID/stat field 22
	Socket     string               `json:"socket"`
	Generation uint64               `json:"generation"`
	Kernel     string               `json:"kernel"`
	BootArgs   string               `json:"boot_args"`
	Rootfs     string               `json:"rootfs"`
	Baseline   string               `json:"baseline"`
	VCPUs      int                  `json:"vcpus"`
	MemMiB     int                  `json:"mem_mib"`
	NICs       map[string]nicRecord `json:"nics,omitempty"` // by attachment name
	// BaselineDigest is the rootfs baseline's resolved digest.
	BaselineDigest string `json:"baseline_digest,omitempty"`
	// Snapshot describes this generation's snapshot of its booted baseline (DIR/snapshot),
	// complete and not yet handed to a next generation.
	Snapshot *snapshotMeta `json:"snapshot,omitempty"`
	// Restore describes the snapshot (DIR/restore) this generation's process loads instead of
	// booting cold; cleared once loaded.
	Restore *snapshotMeta `json:"restore,omitempty"`
	// Network is the guest network configuration the agent applies after every boot.
	Network *guestagent.NetworkConfig `json:"network,omitempty"`
	// Jail is the node's jailed layout (see jail.go); nil when its VMM runs unjailed.
	Jail *jailRecord `json:"jail,omitempty"`
	// PendingTAPs are TAPs about to be created (an intent): a link of that name without a
	// marker is this node's only when its name is listed here.
	PendingTAPs []string `json:"pending_taps,omitempty"`
}

type nicRecord struct {
	IfaceID string `json:"iface_id"`
	TAP     string `json:"tap"`
	Bridge  string `json:"bridge"`
	MAC     string `json:"mac"`
}

const recordKind = "sysbox.firecracker.node"

func (d *Driver) readRecord(name string) (nodeRecord, error) {
	var r nodeRecord
	b, err := os.ReadFile(filepath.Join(d.nodeDir(name), recordFile))
	if err != nil {
		return r, err
	}
	if _, err := durable.DecodeRecord(b, recordKind, 1, &r); err != nil {
		return r, fmt.Errorf("node %s: record: %w", name, err)
	}
	if r.Name != name {
		return r, fmt.Errorf("node %s: record names %q", name, r.Name)
	}
	return r, nil
}

func (d *Driver) writeRecord(r nodeRecord) error {
	b, err := durable.EncodeRecord(recordKind, 1, r)
	if err != nil {
		return err
	}
	return durable.WriteFile(filepath.Join(d.nodeDir(r.Name), recordFile), b, 0o600)
}

// owned reads name's record and proves o owns it: ErrNotFound when no directory; ErrNotOwned
// when the directory holds no record of ours or another owner's; ErrUnavailable when the state
// directory cannot be read.
func (d *Driver) owned(name string, o substrate.Owner) (nodeRecord, error) {
	r, err := d.lookup(name)
	if err != nil {
		return r, err
	}
	if !o.Complete() || r.Marker != o.Marker() {
		return r, fmt.Errorf("firecracker node %s: record marker differs from %s generation %d: %w", name, o.Address, o.Generation, driver.ErrNotOwned)
	}
	return r, nil
}

// lookup reads name's record without an ownership check.
func (d *Driver) lookup(name string) (nodeRecord, error) {
	if !validName(name) {
		return nodeRecord{}, fmt.Errorf("firecracker node %q: not a name this driver gives: %w", name, driver.ErrInvalid)
	}
	if _, err := os.Stat(d.stateDir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nodeRecord{}, fmt.Errorf("firecracker node %s: state directory %s: %v: %w", name, d.stateDir, err, driver.ErrUnavailable)
	}
	fi, err := os.Stat(d.nodeDir(name))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nodeRecord{}, fmt.Errorf("firecracker node %s: %w", name, driver.ErrNotFound)
	case err != nil:
		return nodeRecord{}, fmt.Errorf("firecracker node %s: %v: %w", name, err, driver.ErrUnavailable)
	case !fi.IsDir():
		return nodeRecord{}, fmt.Errorf("firecracker node %s: %s is not a directory sysbox made: %w", name, d.nodeDir(name), driver.ErrNotOwned)
	}
	r, err := d.readRecord(name)
	if errors.Is(err, os.ErrNotExist) {
		return r, fmt.Errorf("firecracker node %s: directory without a sysbox record: %w", name, driver.ErrNotOwned)
	}
	if err != nil {
		return r, fmt.Errorf("%v: %w", err, driver.ErrNotOwned)
	}
	return r, nil
}

func validName(name string) bool {
	return strings.HasPrefix(name, "fc-") && filepath.Base(name) == name && len(name) <= 64
}

// Private envelopes (S7): opaque to the runtime.

const nodePrivateVersion = 1

type nodePrivate struct {
	Name       string `json:"name"`
	Dir        string `json:"dir"`
	Socket     string `json:"socket"`
	PID        int    `json:"pid"`
	StartTime  uint64 `json:"start_time"`
	Generation uint64 `json:"generation"`
	Rootfs     string `json:"rootfs"`
}

func nodeHandle(r nodeRecord, dir string) substrate.Handle {
	data, _ := json.Marshal(nodePrivate{Name: r.Name, Dir: dir, Socket: r.Socket, PID: r.PID, StartTime: r.StartTime,
		Generation: r.Generation, Rootfs: r.Rootfs})
	return substrate.Handle{Driver: Name, ExternalID: r.Name, Private: substrate.Envelope{Driver: Name, Version: nodePrivateVersion, Data: data}}
}

const nicPrivateVersion = 1

type nicPrivate struct {
	TAP     string `json:"tap"`
	Bridge  string `json:"bridge"`
	IfaceID string `json:"iface_id"`
	Marker  string `json:"marker"`
}

func decodeNIC(env substrate.Envelope) (nicPrivate, error) {
	var p nicPrivate
	if err := env.Open(Name, nicPrivateVersion, &p); err != nil {
		return p, fmt.Errorf("attachment %w: %w", err, driver.ErrInvalid)
	}
	if p.TAP == "" {
		return p, fmt.Errorf("attachment envelope: no TAP recorded: %w", driver.ErrInvalid)
	}
	return p, nil
}

// CheckPrivate refuses an envelope of another driver, an unknown version or one lacking the
// node's name, socket and process identity.
func (d *Driver) CheckPrivate(env substrate.Envelope) error {
	if env.Driver != Name {
		return fmt.Errorf("firecracker: envelope of driver %q", env.Driver)
	}
	switch env.Version {
	case nodePrivateVersion:
	default:
		return fmt.Errorf("firecracker: envelope version %d is unknown (this sysbox reads %d); upgrade sysbox", env.Version, nodePrivateVersion)
	}
	var p nodePrivate
	if err := json.Unmarshal(env.Data, &p); err != nil {
		// An attachment envelope is also ours; accept it when it names a TAP.
		if _, nerr := decodeNIC(env); nerr == nil {
			return nil
		}
		return fmt.Errorf("firecracker: envelope: %w", err)
	}
	if p.Name == "" {
		if _, err := decodeNIC(env); err == nil {
			return nil
		}
		return fmt.Errorf("firecracker: envelope names no node")
	}
	if p.Socket == "" || p.PID <= 0 || p.StartTime == 0 || p.Generation == 0 {
		return fmt.Errorf("firecracker: envelope of node %s lacks socket, process identity or generation: recreate the node", p.Name)
	}
	return nil
}
