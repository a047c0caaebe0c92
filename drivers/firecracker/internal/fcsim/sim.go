package fcsim

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"golang.org/x/sys/unix"
)

// Instance states, as the contract's InstanceInfo.state spells them.
const (
	stateNotStarted = "Not started"
	stateRunning    = "Running"
	statePaused     = "Paused"
)

// maxBody bounds a request body; Firecracker's own limit is 50 KiB.
const maxBody = 50 << 10

// Options configure a Sim.
type Options struct {
	// ID is the instance id (--id), reported by GET /.
	ID string
	// RequestLog, when set, receives one JSON line per request (see Entry).
	RequestLog io.Writer
	// TapExists reports whether a TAP device of that name exists on the host. Nil means: a
	// network interface /sys/class/net/NAME with a tun_flags file (a tun/tap device).
	TapExists func(name string) bool
	// Hooks let a caller act like the VMM's device side; nil hooks do nothing.
	Hooks Hooks
	// SnapshotLedger, when set, is a file shared by every simulator process of a test: each
	// snapshot restored is recorded there, and a snapshot restored before is refused (the
	// Firecracker documentation calls resuming one snapshot twice insecure).
	SnapshotLedger string
	// SnapshotLedgerFile is the ledger already open (read-write, append), for a simulator that
	// cannot reach SnapshotLedger's path (chrooted by the jailer stand-in); it wins over it.
	SnapshotLedgerFile *os.File
}

// Hooks are called, under the simulator's lock, when the VMM would touch host devices.
type Hooks struct {
	// Start runs at InstanceStart and at a snapshot load with the network interfaces (sorted by
	// iface_id) and the vsock uds_path ("" without vsock). An error fails the request.
	Start func(nics []NIC, udsPath string) error
	// Pause runs when the guest's vCPUs stop (true: PATCH /vm Paused, a load without resume_vm)
	// or run again (false). An error fails the request.
	Pause func(paused bool) error
}

// NIC is one configured network interface as the device side sees it.
type NIC struct {
	IfaceID     string
	HostDevName string
	GuestMAC    string // "" when Firecracker would pick one
}

// Entry is one line of the request log.
type Entry struct {
	Seq       int             `json:"seq"`
	Method    string          `json:"method"`
	Path      string          `json:"path"`
	Operation string          `json:"operation,omitempty"`
	Body      json.RawMessage `json:"body,omitempty"`
	Status    int             `json:"status"`
	Fault     string          `json:"fault,omitempty"`
}

// Sim is the simulated Firecracker API of one process: it checks every request against the
// contract and then against the VMM's state machine. It is an http.Handler.
type Sim struct {
	c    *contract
	opts Options

	mu      sync.Mutex
	seq     int
	state   string
	touched bool // a resource other than logger/metrics was configured: no snapshot load any more
	loaded  bool // restored from a snapshot
	vm      vmConfig
}

// vmConfig is what a snapshot carries.
type vmConfig struct {
	Machine    machineConfig           `json:"machine"`
	Boot       *bootSource             `json:"boot,omitempty"`
	Drives     map[string]drive        `json:"drives"`
	Interfaces map[string]netInterface `json:"interfaces"`
	Vsock      *vsock                  `json:"vsock,omitempty"`
}

type machineConfig struct {
	VCPUCount  int `json:"vcpu_count"`
	MemSizeMiB int `json:"mem_size_mib"`
}

type bootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	InitrdPath      string `json:"initrd_path"`
	BootArgs        string `json:"boot_args"`
}

type drive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
}

type netInterface struct {
	IfaceID     string `json:"iface_id"`
	HostDevName string `json:"host_dev_name"`
	GuestMAC    string `json:"guest_mac"`
}

type vsock struct {
	GuestCID int    `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// snapshotMagic marks a file the simulator wrote with /snapshot/create.
const snapshotMagic = "fcsim-snapshot-v1"

type snapshotFile struct {
	Magic string   `json:"magic"`
	ID    string   `json:"id"`
	Nonce string   `json:"nonce"` // unique per snapshot: the ledger refuses a second restore
	VM    vmConfig `json:"vm"`
}

// New returns a simulator for a fresh process.
func New(opts Options) (*Sim, error) {
	c, err := loadContract()
	if err != nil {
		return nil, err
	}
	if opts.TapExists == nil {
		opts.TapExists = sysfsTapExists
	}
	return &Sim{c: c, opts: opts, state: stateNotStarted, vm: freshVM()}, nil
}

func freshVM() vmConfig {
	// Firecracker's defaults when /machine-config is never sent.
	return vmConfig{Machine: machineConfig{VCPUCount: 1, MemSizeMiB: 128}, Drives: map[string]drive{}, Interfaces: map[string]netInterface{}}
}

func sysfsTapExists(name string) bool {
	if name == "" || filepath.Base(name) != name {
		return false
	}
	_, err := os.Stat(filepath.Join("/sys/class/net", name, "tun_flags"))
	return err == nil
}

// fault is a refused request: HTTP status and the contract's fault_message.
type fault struct {
	status int
	msg    string
}

func (f *fault) Error() string { return f.msg }

func badRequest(format string, args ...any) *fault {
	return &fault{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// ServeHTTP validates r against the contract, applies it to the state machine, answers and logs.
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	e := Entry{Seq: s.seq, Method: r.Method, Path: r.URL.Path}
	if len(body) > 0 && json.Valid(body) {
		e.Body = json.RawMessage(body)
	}
	var out any
	f := func() *fault {
		if err != nil {
			return badRequest("reading the request body: %v", err)
		}
		if len(body) > maxBody {
			return &fault{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("request body larger than %d bytes", maxBody)}
		}
		route, params, err := s.c.router.FindRoute(r)
		if err != nil {
			if errors.Is(err, routers.ErrMethodNotAllowed) {
				return badRequest("contract: method %s not allowed on %s", r.Method, r.URL.Path)
			}
			return badRequest("contract: no operation %s %s: %v", r.Method, r.URL.Path, err)
		}
		e.Operation = route.Operation.OperationID
		// openapi3filter lets an empty body through when no Content-Type came with it; every
		// body the contract declares is required.
		if rb := route.Operation.RequestBody; rb != nil && rb.Value != nil && len(body) == 0 {
			return badRequest("contract: %s %s: request body is required", r.Method, r.URL.Path)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{SkipSettingDefaults: true, RejectWhenRequestBodyNotSpecified: true}}
		if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
			return badRequest("contract: %s %s: %v", r.Method, r.URL.Path, err)
		}
		var res any
		res, f := s.apply(route.Operation.OperationID, params, body)
		out = res
		return f
	}()
	if f != nil {
		e.Status, e.Fault = f.status, f.msg
	} else if out != nil {
		e.Status = http.StatusOK
	} else {
		e.Status = http.StatusNoContent
	}
	s.logEntry(e)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	switch {
	case f != nil:
		_ = json.NewEncoder(w).Encode(map[string]string{"fault_message": f.msg})
	case out != nil:
		_ = json.NewEncoder(w).Encode(out)
	}
}

func (s *Sim) logEntry(e Entry) {
	if s.opts.RequestLog == nil {
		return
	}
	b, err := json.Marshal(e)
	if err != nil {
		return
	}
	// One write per line, so concurrent readers never see half a line of an O_APPEND file.
	_, _ = s.opts.RequestLog.Write(append(b, '\n'))
}

// preBootOnly lists the operations Firecracker refuses once the guest started.
var preBootOnly = map[string]bool{
	"putMachineConfiguration":      true,
	"putGuestBootSource":           true,
	"putGuestDriveByID":            true,
	"putGuestNetworkInterfaceByID": true,
	"putGuestVsock":                true,
	"putCpuConfiguration":          true,
	"putGuestPmemByID":             true,
	"putMmdsConfig":                true,
	"putEntropyDevice":             true,
	"putSerialDevice":              true,
	"putBalloon":                   true,
	"putMemoryHotplug":             true,
	"putLogger":                    true,
	"putMetrics":                   true,
	"loadSnapshot":                 true,
}

// apply runs a contract-valid request through the state machine.
func (s *Sim) apply(op string, params map[string]string, body []byte) (any, *fault) {
	if preBootOnly[op] && s.state != stateNotStarted {
		return nil, badRequest("The requested operation is not supported after starting the microVM.")
	}
	switch op {
	case "describeInstance":
		return map[string]string{"app_name": "Firecracker", "id": s.opts.ID, "state": s.state, "vmm_version": "1.17.0-fcsim"}, nil
	case "getFirecrackerVersion":
		return map[string]string{"firecracker_version": "1.17.0-fcsim"}, nil
	case "getMachineConfiguration":
		return s.vm.Machine, nil
	case "putLogger", "putMetrics":
		return nil, nil
	case "putMachineConfiguration":
		var m machineConfig
		if f := decode(body, &m); f != nil {
			return nil, f
		}
		if m.VCPUCount != 1 && m.VCPUCount%2 != 0 {
			return nil, badRequest("Invalid vCPU count: %d: the vCPU number has to be 1 or an even number", m.VCPUCount)
		}
		if m.MemSizeMiB < 1 {
			return nil, badRequest("The memory size (MiB) is invalid: %d", m.MemSizeMiB)
		}
		s.touched = true
		s.vm.Machine = m
		return nil, nil
	case "putGuestBootSource":
		return s.putBootSource(body)
	case "putGuestDriveByID":
		return s.putDrive(params, body)
	case "patchGuestDriveByID":
		return s.patchDrive(params, body)
	case "putGuestNetworkInterfaceByID":
		return s.putInterface(params, body)
	case "putGuestVsock":
		return s.putVsock(body)
	case "createSyncAction":
		return s.action(body)
	case "patchVm":
		return s.patchVM(body)
	case "createSnapshot":
		return s.createSnapshot(body)
	case "loadSnapshot":
		return nil, s.loadSnapshot(body)
	}
	return nil, badRequest("fcsim: operation %s is in the contract but not simulated", op)
}

func (s *Sim) putBootSource(body []byte) (any, *fault) {
	var b bootSource
	if f := decode(body, &b); f != nil {
		return nil, f
	}
	if f := mustOpen("kernel_image_path", b.KernelImagePath); f != nil {
		return nil, f
	}
	if b.InitrdPath != "" {
		if f := mustOpen("initrd_path", b.InitrdPath); f != nil {
			return nil, f
		}
	}
	s.touched = true
	s.vm.Boot = &b
	return nil, nil
}

func (s *Sim) putDrive(params map[string]string, body []byte) (any, *fault) {
	var d drive
	if f := decode(body, &d); f != nil {
		return nil, f
	}
	if d.DriveID != params["drive_id"] {
		return nil, badRequest("The id from the path (%s) does not match the id from the body (%s)!", params["drive_id"], d.DriveID)
	}
	if d.PathOnHost == "" {
		return nil, badRequest("drive %s: path_on_host is required for a virtio-block drive", d.DriveID)
	}
	if f := mustOpen("path_on_host", d.PathOnHost); f != nil {
		return nil, f
	}
	if d.IsRootDevice {
		for id, o := range s.vm.Drives {
			if o.IsRootDevice && id != d.DriveID {
				return nil, badRequest("A root block device already exists (%s)!", id)
			}
		}
	}
	s.touched = true
	s.vm.Drives[d.DriveID] = d
	return nil, nil
}

// patchDrive swaps a started guest's drive onto another host file (post-boot only).
func (s *Sim) patchDrive(params map[string]string, body []byte) (any, *fault) {
	var p struct {
		DriveID    string `json:"drive_id"`
		PathOnHost string `json:"path_on_host"`
	}
	if f := decode(body, &p); f != nil {
		return nil, f
	}
	if s.state == stateNotStarted {
		return nil, badRequest("The requested operation is not supported before starting the microVM.")
	}
	if p.DriveID != params["drive_id"] {
		return nil, badRequest("The id from the path (%s) does not match the id from the body (%s)!", params["drive_id"], p.DriveID)
	}
	d, ok := s.vm.Drives[p.DriveID]
	if !ok {
		return nil, badRequest("Drive %s: no such drive", p.DriveID)
	}
	if p.PathOnHost != "" {
		if f := mustOpen("path_on_host", p.PathOnHost); f != nil {
			return nil, f
		}
		d.PathOnHost = p.PathOnHost
	}
	s.vm.Drives[p.DriveID] = d
	return nil, nil
}

func (s *Sim) putInterface(params map[string]string, body []byte) (any, *fault) {
	var n netInterface
	if f := decode(body, &n); f != nil {
		return nil, f
	}
	if n.IfaceID != params["iface_id"] {
		return nil, badRequest("The id from the path (%s) does not match the id from the body (%s)!", params["iface_id"], n.IfaceID)
	}
	if !s.opts.TapExists(n.HostDevName) {
		return nil, badRequest("Open tap device failed: %s: no such TAP device", n.HostDevName)
	}
	for id, o := range s.vm.Interfaces {
		if id != n.IfaceID && o.HostDevName == n.HostDevName {
			return nil, badRequest("The host device name %s is already in use by %s", n.HostDevName, id)
		}
		if id != n.IfaceID && n.GuestMAC != "" && o.GuestMAC == n.GuestMAC {
			return nil, badRequest("The MAC address %s is already in use by %s", n.GuestMAC, id)
		}
	}
	s.touched = true
	s.vm.Interfaces[n.IfaceID] = n
	return nil, nil
}

func (s *Sim) putVsock(body []byte) (any, *fault) {
	var v vsock
	if f := decode(body, &v); f != nil {
		return nil, f
	}
	if _, err := os.Lstat(v.UDSPath); err == nil {
		return nil, badRequest("Cannot create backend for vsock device: %s: address in use", v.UDSPath)
	}
	s.touched = true
	s.vm.Vsock = &v
	return nil, nil
}

func (s *Sim) action(body []byte) (any, *fault) {
	var a struct {
		ActionType string `json:"action_type"`
	}
	if f := decode(body, &a); f != nil {
		return nil, f
	}
	if a.ActionType != "InstanceStart" {
		if s.state == stateNotStarted {
			return nil, badRequest("%s: the microVM is not running", a.ActionType)
		}
		return nil, nil
	}
	return nil, s.instanceStart()
}

func (s *Sim) patchVM(body []byte) (any, *fault) {
	var v struct {
		State string `json:"state"`
	}
	if f := decode(body, &v); f != nil {
		return nil, f
	}
	if s.state == stateNotStarted {
		return nil, badRequest("The microVM is not running: cannot set state %s", v.State)
	}
	if f := s.pause(v.State == "Paused"); f != nil {
		return nil, f
	}
	if v.State == "Paused" {
		s.state = statePaused
	} else {
		s.state = stateRunning
	}
	return nil, nil
}

func (s *Sim) pause(paused bool) *fault {
	if s.opts.Hooks.Pause == nil {
		return nil
	}
	if err := s.opts.Hooks.Pause(paused); err != nil {
		return &fault{status: http.StatusInternalServerError, msg: fmt.Sprintf("pausing the vCPUs: %v", err)}
	}
	return nil
}

func (s *Sim) createSnapshot(body []byte) (any, *fault) {
	var c struct {
		SnapshotPath string `json:"snapshot_path"`
		MemFilePath  string `json:"mem_file_path"`
		SnapshotType string `json:"snapshot_type"`
	}
	if f := decode(body, &c); f != nil {
		return nil, f
	}
	if s.state != statePaused {
		return nil, badRequest("Create snapshot: the microVM must be Paused, it is %s", s.state)
	}
	if c.SnapshotType == "Diff" {
		return nil, badRequest("Create snapshot: Diff needs track_dirty_pages, which fcsim does not simulate")
	}
	return nil, s.writeSnapshot(c.SnapshotPath, c.MemFilePath)
}

func decode(body []byte, v any) *fault {
	if err := json.Unmarshal(body, v); err != nil {
		return badRequest("An error occurred when deserializing the json body of a request: %v", err)
	}
	return nil
}

// mustOpen mirrors Firecracker opening host files when the resource is configured.
func mustOpen(field, p string) *fault {
	f, err := os.Open(p)
	if err != nil {
		return badRequest("%s: %v", field, err)
	}
	f.Close()
	return nil
}

func (s *Sim) instanceStart() *fault {
	if s.state != stateNotStarted {
		return badRequest("The requested operation is not supported after starting the microVM.")
	}
	if s.vm.Boot == nil {
		return badRequest("Cannot start microvm without kernel configuration.")
	}
	root := false
	for _, d := range s.vm.Drives {
		root = root || d.IsRootDevice
	}
	if !root {
		return badRequest("Cannot start microvm without a root block device.")
	}
	if f := s.startDevices(); f != nil {
		return f
	}
	s.state = stateRunning
	return nil
}

// startDevices checks every TAP still exists (the VMM holds it open from here on) and runs the
// Start hook.
func (s *Sim) startDevices() *fault {
	var nics []NIC
	for id, n := range s.vm.Interfaces {
		if !s.opts.TapExists(n.HostDevName) {
			return badRequest("Open tap device failed: %s (interface %s): no such TAP device", n.HostDevName, id)
		}
		nics = append(nics, NIC{IfaceID: id, HostDevName: n.HostDevName, GuestMAC: n.GuestMAC})
	}
	sort.Slice(nics, func(i, j int) bool { return nics[i].IfaceID < nics[j].IfaceID })
	uds := ""
	if s.vm.Vsock != nil {
		uds = s.vm.Vsock.UDSPath
	}
	if s.opts.Hooks.Start != nil {
		if err := s.opts.Hooks.Start(nics, uds); err != nil {
			return &fault{status: http.StatusInternalServerError, msg: fmt.Sprintf("starting devices: %v", err)}
		}
	}
	return nil
}

func (s *Sim) writeSnapshot(snapPath, memPath string) *fault {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return &fault{status: http.StatusInternalServerError, msg: err.Error()}
	}
	b, err := json.Marshal(snapshotFile{Magic: snapshotMagic, ID: s.opts.ID, Nonce: hex.EncodeToString(nonce), VM: s.vm})
	if err != nil {
		return &fault{status: http.StatusInternalServerError, msg: err.Error()}
	}
	if err := os.WriteFile(snapPath, b, 0o600); err != nil {
		return badRequest("Create snapshot: snapshot_path: %v", err)
	}
	// Guest memory: a sparse file of the guest's size, as a Full snapshot's memory file is.
	m, err := os.OpenFile(memPath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err == nil {
		err = m.Truncate(int64(s.vm.Machine.MemSizeMiB) << 20)
		if cerr := m.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return badRequest("Create snapshot: mem_file_path: %v", err)
	}
	return nil
}

// restoreOnce records nonce in the ledger (the open file f, else the file at path ledger)
// under an exclusive lock, refusing one already there.
func restoreOnce(ledger string, f *os.File, nonce, path string) *fault {
	if nonce == "" {
		return badRequest("Load snapshot: %s carries no nonce", path)
	}
	if f == nil {
		var err error
		if f, err = os.OpenFile(ledger, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600); err != nil {
			return &fault{status: http.StatusInternalServerError, msg: fmt.Sprintf("snapshot ledger: %v", err)}
		}
		defer f.Close()
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return &fault{status: http.StatusInternalServerError, msg: fmt.Sprintf("snapshot ledger: %v", err)}
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN) //nolint:errcheck // closing or exiting unlocks too
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return &fault{status: http.StatusInternalServerError, msg: fmt.Sprintf("snapshot ledger: %v", err)}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return &fault{status: http.StatusInternalServerError, msg: fmt.Sprintf("snapshot ledger: %v", err)}
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line == nonce {
			return badRequest("Load snapshot: %s was restored before; fcsim refuses to resume one snapshot twice (insecure per Firecracker's snapshot documentation)", path)
		}
	}
	if _, err := f.WriteString(nonce + "\n"); err != nil {
		return &fault{status: http.StatusInternalServerError, msg: fmt.Sprintf("snapshot ledger: %v", err)}
	}
	return nil
}

func (s *Sim) loadSnapshot(body []byte) *fault {
	var l struct {
		SnapshotPath     string          `json:"snapshot_path"`
		MemFilePath      string          `json:"mem_file_path"`
		MemBackend       json.RawMessage `json:"mem_backend"`
		ResumeVM         bool            `json:"resume_vm"`
		NetworkOverrides []netInterface  `json:"network_overrides"`
		VsockOverride    *vsock          `json:"vsock_override"`
	}
	if f := decode(body, &l); f != nil {
		return f
	}
	if s.touched {
		return badRequest("Loading a microVM snapshot not allowed after configuring boot-specific resources.")
	}
	if (l.MemFilePath == "") == (len(l.MemBackend) == 0) {
		return badRequest("Exactly one of mem_file_path and mem_backend must be given.")
	}
	if len(l.MemBackend) > 0 {
		return badRequest("fcsim: mem_backend (UFFD) is not simulated; use mem_file_path")
	}
	raw, err := os.ReadFile(l.SnapshotPath)
	if err != nil {
		return badRequest("Load snapshot: snapshot_path: %v", err)
	}
	var snap snapshotFile
	if err := json.Unmarshal(raw, &snap); err != nil || snap.Magic != snapshotMagic {
		return badRequest("Load snapshot: %s is not a snapshot file", l.SnapshotPath)
	}
	if f := mustOpen("mem_file_path", l.MemFilePath); f != nil {
		return f
	}
	if s.opts.SnapshotLedger != "" || s.opts.SnapshotLedgerFile != nil {
		if f := restoreOnce(s.opts.SnapshotLedger, s.opts.SnapshotLedgerFile, snap.Nonce, l.SnapshotPath); f != nil {
			return f
		}
	}
	vm := snap.VM
	for _, o := range l.NetworkOverrides {
		n, ok := vm.Interfaces[o.IfaceID]
		if !ok {
			return badRequest("Load snapshot: network override for unknown interface %s", o.IfaceID)
		}
		n.HostDevName = o.HostDevName
		vm.Interfaces[o.IfaceID] = n
	}
	if l.VsockOverride != nil {
		if vm.Vsock == nil {
			return badRequest("Load snapshot: vsock_override but the snapshot has no vsock device")
		}
		vm.Vsock.UDSPath = l.VsockOverride.UDSPath
	}
	// Firecracker reopens every drive at the path the snapshot recorded.
	for id, d := range vm.Drives {
		if f := mustOpen("drive "+id+" path_on_host", d.PathOnHost); f != nil {
			return f
		}
	}
	if vm.Vsock != nil {
		if _, err := os.Lstat(vm.Vsock.UDSPath); err == nil {
			return badRequest("Load snapshot: vsock uds_path %s: address in use", vm.Vsock.UDSPath)
		}
	}
	prev := s.vm
	s.vm = vm
	if f := s.startDevices(); f != nil {
		s.vm = prev
		return f
	}
	s.loaded = true
	s.state = statePaused
	if l.ResumeVM {
		s.state = stateRunning
	}
	return s.pause(!l.ResumeVM)
}
