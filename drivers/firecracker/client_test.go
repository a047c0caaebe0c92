package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"zyvor.dev/sysbox/drivers/firecracker/internal/fcsim"
	"zyvor.dev/sysbox/internal/driver"
)

// lockedBuffer collects the simulator's request log.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// entries parses the request log.
func (l *lockedBuffer) entries(t *testing.T) []fcsim.Entry {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []fcsim.Entry
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		if line == "" {
			continue
		}
		var e fcsim.Entry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("request log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// ops is the log as "METHOD PATH STATUS" lines.
func (l *lockedBuffer) ops(t *testing.T) []string {
	var out []string
	for _, e := range l.entries(t) {
		out = append(out, fmt.Sprintf("%s %s %d", e.Method, e.Path, e.Status))
	}
	return out
}

// simEnv is one simulated Firecracker process served over a unix socket, as the real one is.
type simEnv struct {
	dir    string
	client *Client
	log    *lockedBuffer
	taps   map[string]bool
}

// shortDir is a temp directory short enough for unix socket paths (t.TempDir embeds the test name).
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// newSimEnv serves a fresh simulator; ledger, when given, is its snapshot ledger.
func newSimEnv(t *testing.T, dir string, ledger ...string) *simEnv {
	t.Helper()
	env := &simEnv{dir: dir, log: &lockedBuffer{}, taps: map[string]bool{"tap0": true, "tap1": true}}
	opts := fcsim.Options{ID: "node-a", RequestLog: env.log, TapExists: func(name string) bool { return env.taps[name] }}
	if len(ledger) > 0 {
		opts.SnapshotLedger = ledger[0]
	}
	sim, err := fcsim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "api-*.sock")
	if err != nil {
		t.Fatal(err)
	}
	sock := f.Name()
	f.Close()
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(sim)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := NewClient(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	env.client = c
	return env
}

// file creates an empty host file (kernel, rootfs) and returns its path.
func (e *simEnv) file(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// configure sends a complete pre-boot configuration.
func (e *simEnv) configure(t *testing.T, ctx context.Context) {
	t.Helper()
	c := e.client
	must(t, c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 2, MemSizeMiB: 64}))
	must(t, c.PutBootSource(ctx, BootSource{KernelImagePath: e.file(t, "vmlinux"), BootArgs: "console=ttyS0 reboot=k panic=1"}))
	must(t, c.PutDrive(ctx, Drive{DriveID: "rootfs", PathOnHost: e.file(t, "rootfs.ext4"), IsRootDevice: true}))
	must(t, c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "tap0", GuestMAC: "02:00:00:00:00:01"}))
	must(t, c.PutVsock(ctx, Vsock{GuestCID: 3, UDSPath: filepath.Join(e.dir, "v.sock")}))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantFault asserts err is the API's refusal and that its fault_message contains want.
func wantFault(t *testing.T, err error, want string) {
	t.Helper()
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("got %v, want an *APIError with fault %q", err, want)
	}
	if ae.Status != http.StatusBadRequest || !strings.Contains(ae.FaultMessage, want) {
		t.Fatalf("got HTTP %d %q, want 400 containing %q", ae.Status, ae.FaultMessage, want)
	}
	if !strings.Contains(err.Error(), ae.FaultMessage) {
		t.Fatalf("error %q does not carry the fault_message", err)
	}
}

func TestBootPauseSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	dir := shortDir(t)
	a := newSimEnv(t, dir)
	info, err := a.client.Describe(ctx)
	must(t, err)
	if info.State != StateNotStarted || info.ID != "node-a" {
		t.Fatalf("fresh: got %+v, want state %q id node-a", info, StateNotStarted)
	}
	a.configure(t, ctx)
	must(t, a.client.InstanceStart(ctx))
	if info, _ := a.client.Describe(ctx); info.State != StateRunning {
		t.Fatalf("after InstanceStart: got %q, want %q", info.State, StateRunning)
	}
	must(t, a.client.PatchVM(ctx, VMPaused))
	if info, _ := a.client.Describe(ctx); info.State != StatePaused {
		t.Fatalf("after PATCH /vm Paused: got %q, want %q", info.State, StatePaused)
	}
	snap, mem := filepath.Join(dir, "snap"), filepath.Join(dir, "mem")
	must(t, a.client.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: snap, MemFilePath: mem, SnapshotType: "Full"}))
	want := []string{"GET / 200", "PUT /machine-config 204", "PUT /boot-source 204", "PUT /drives/rootfs 204",
		"PUT /network-interfaces/eth0 204", "PUT /vsock 204", "PUT /actions 204", "GET / 200",
		"PATCH /vm 204", "GET / 200", "PUT /snapshot/create 204"}
	if got := a.log.ops(t); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("request log:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A fresh process restores it onto another TAP and another vsock socket.
	b := newSimEnv(t, dir)
	must(t, b.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: snap, MemFilePath: mem, ResumeVM: true,
		NetworkOverrides: []NetworkOverride{{IfaceID: "eth0", HostDevName: "tap1"}},
		VsockOverride:    &VsockOverride{UDSPath: filepath.Join(dir, "v2.sock")}}))
	if info, _ := b.client.Describe(ctx); info.State != StateRunning {
		t.Fatalf("after load with resume_vm: got %q, want %q", info.State, StateRunning)
	}
	// A restored process is not fresh: a second load is refused.
	wantFault(t, b.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: snap, MemFilePath: mem}), "not supported after starting")
	e := b.log.entries(t)[0]
	var body map[string]any
	must(t, json.Unmarshal(e.Body, &body))
	if ov, _ := body["network_overrides"].([]any); len(ov) != 1 {
		t.Fatalf("load body %s: want one network override", e.Body)
	}
}

// TestSnapshotRestoredOnce: with a ledger shared by the simulator processes, a snapshot is
// restored at most once; PATCH /drives is post-boot only and reopens the new file.
func TestSnapshotRestoredOnce(t *testing.T) {
	ctx := context.Background()
	dir := shortDir(t)
	ledger := filepath.Join(dir, "ledger")
	a := newSimEnv(t, dir, ledger)
	a.configure(t, ctx)
	wantFault(t, a.client.PatchDrive(ctx, "rootfs", a.file(t, "rootfs.ext4")), "before starting")
	must(t, a.client.InstanceStart(ctx))
	wantFault(t, a.client.PatchDrive(ctx, "rootfs", filepath.Join(dir, "no-such-disk")), "no such file")
	wantFault(t, a.client.PatchDrive(ctx, "data", a.file(t, "rootfs.ext4")), "no such drive")
	must(t, a.client.PatchVM(ctx, VMPaused))
	snap, mem := filepath.Join(dir, "snap"), filepath.Join(dir, "mem")
	must(t, a.client.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: snap, MemFilePath: mem, SnapshotType: "Full"}))
	load := SnapshotLoad{SnapshotPath: snap, MemFilePath: mem, NetworkOverrides: []NetworkOverride{{IfaceID: "eth0", HostDevName: "tap1"}}}
	b := newSimEnv(t, dir, ledger)
	load.VsockOverride = &VsockOverride{UDSPath: filepath.Join(dir, "v2.sock")}
	must(t, b.client.LoadSnapshot(ctx, load))
	must(t, b.client.PatchDrive(ctx, "rootfs", a.file(t, "rootfs.ext4")))
	must(t, b.client.PatchVM(ctx, VMResumed))
	c := newSimEnv(t, dir, ledger)
	load.VsockOverride = &VsockOverride{UDSPath: filepath.Join(dir, "v3.sock")}
	wantFault(t, c.client.LoadSnapshot(ctx, load), "restored before")
	if info, _ := c.client.Describe(ctx); info.State != StateNotStarted {
		t.Fatalf("after a refused load: got %q, want %q", info.State, StateNotStarted)
	}
}

// TestStateMachine drives each rule the simulator enforces through the client; every refusal
// must reach the caller with Firecracker's fault_message.
func TestStateMachine(t *testing.T) {
	ctx := context.Background()
	dir := shortDir(t)
	snapOf := func(t *testing.T) (string, string) {
		e := newSimEnv(t, dir)
		e.configure(t, ctx)
		must(t, e.client.InstanceStart(ctx))
		must(t, e.client.PatchVM(ctx, VMPaused))
		s, m := filepath.Join(dir, "s-"+t.Name()[len("TestStateMachine/"):]), filepath.Join(dir, "m-"+t.Name()[len("TestStateMachine/"):])
		must(t, e.client.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: s, MemFilePath: m}))
		return s, m
	}
	tests := []struct {
		name string
		run  func(t *testing.T, e *simEnv) error
		want string
	}{
		{"drive after start", func(t *testing.T, e *simEnv) error {
			e.configure(t, ctx)
			must(t, e.client.InstanceStart(ctx))
			return e.client.PutDrive(ctx, Drive{DriveID: "data", PathOnHost: e.file(t, "data"), IsReadOnly: true})
		}, "not supported after starting"},
		{"machine-config after start", func(t *testing.T, e *simEnv) error {
			e.configure(t, ctx)
			must(t, e.client.InstanceStart(ctx))
			return e.client.PutMachineConfig(ctx, MachineConfig{VCPUCount: 1, MemSizeMiB: 32})
		}, "not supported after starting"},
		{"network interface after start", func(t *testing.T, e *simEnv) error {
			e.configure(t, ctx)
			must(t, e.client.InstanceStart(ctx))
			return e.client.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth1", HostDevName: "tap1"})
		}, "not supported after starting"},
		{"second InstanceStart", func(t *testing.T, e *simEnv) error {
			e.configure(t, ctx)
			must(t, e.client.InstanceStart(ctx))
			return e.client.InstanceStart(ctx)
		}, "not supported after starting"},
		{"start without boot source", func(t *testing.T, e *simEnv) error {
			must(t, e.client.PutDrive(ctx, Drive{DriveID: "rootfs", PathOnHost: e.file(t, "r"), IsRootDevice: true}))
			return e.client.InstanceStart(ctx)
		}, "without kernel configuration"},
		{"start without root drive", func(t *testing.T, e *simEnv) error {
			must(t, e.client.PutBootSource(ctx, BootSource{KernelImagePath: e.file(t, "k")}))
			must(t, e.client.PutDrive(ctx, Drive{DriveID: "data", PathOnHost: e.file(t, "d")}))
			return e.client.InstanceStart(ctx)
		}, "without a root block device"},
		{"second root drive", func(t *testing.T, e *simEnv) error {
			must(t, e.client.PutDrive(ctx, Drive{DriveID: "rootfs", PathOnHost: e.file(t, "r"), IsRootDevice: true}))
			return e.client.PutDrive(ctx, Drive{DriveID: "other", PathOnHost: e.file(t, "o"), IsRootDevice: true})
		}, "root block device already exists"},
		{"missing TAP", func(t *testing.T, e *simEnv) error {
			return e.client.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "sbt-absent"})
		}, "no such TAP device"},
		{"TAP vanished before start", func(t *testing.T, e *simEnv) error {
			e.configure(t, ctx)
			delete(e.taps, "tap0")
			return e.client.InstanceStart(ctx)
		}, "no such TAP device"},
		{"TAP used twice", func(t *testing.T, e *simEnv) error {
			must(t, e.client.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "tap0"}))
			return e.client.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth1", HostDevName: "tap0"})
		}, "already in use"},
		{"missing kernel file", func(t *testing.T, e *simEnv) error {
			return e.client.PutBootSource(ctx, BootSource{KernelImagePath: filepath.Join(e.dir, "absent-vmlinux")})
		}, "kernel_image_path"},
		{"pause before start", func(t *testing.T, e *simEnv) error {
			return e.client.PatchVM(ctx, VMPaused)
		}, "not running"},
		{"snapshot while running", func(t *testing.T, e *simEnv) error {
			e.configure(t, ctx)
			must(t, e.client.InstanceStart(ctx))
			return e.client.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: filepath.Join(e.dir, "sr"), MemFilePath: filepath.Join(e.dir, "mr")})
		}, "must be Paused"},
		{"snapshot before start", func(t *testing.T, e *simEnv) error {
			return e.client.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: filepath.Join(e.dir, "sb"), MemFilePath: filepath.Join(e.dir, "mb")})
		}, "must be Paused"},
		{"load after configuring", func(t *testing.T, e *simEnv) error {
			s, m := snapOf(t)
			must(t, e.client.PutMachineConfig(ctx, MachineConfig{VCPUCount: 1, MemSizeMiB: 32}))
			return e.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: s, MemFilePath: m})
		}, "not allowed after configuring"},
		{"load twice", func(t *testing.T, e *simEnv) error {
			s, m := snapOf(t)
			e.taps["tap0"] = true
			must(t, e.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: s, MemFilePath: m, VsockOverride: &VsockOverride{UDSPath: filepath.Join(e.dir, "lt.sock")}}))
			return e.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: s, MemFilePath: m})
		}, "not supported after starting"},
		{"load override of unknown interface", func(t *testing.T, e *simEnv) error {
			s, m := snapOf(t)
			return e.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: s, MemFilePath: m,
				NetworkOverrides: []NetworkOverride{{IfaceID: "eth9", HostDevName: "tap1"}}})
		}, "unknown interface eth9"},
		{"load onto a missing TAP", func(t *testing.T, e *simEnv) error {
			s, m := snapOf(t)
			return e.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: s, MemFilePath: m,
				NetworkOverrides: []NetworkOverride{{IfaceID: "eth0", HostDevName: "sbt-gone"}}})
		}, "no such TAP device"},
		{"load of a non-snapshot", func(t *testing.T, e *simEnv) error {
			return e.client.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: e.file(t, "junk"), MemFilePath: e.file(t, "junkmem")})
		}, "is not a snapshot file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newSimEnv(t, shortDir(t))
			wantFault(t, tt.run(t, e), tt.want)
		})
	}
}

// TestContractViolations sends, as raw HTTP, bodies the client's validation never lets through;
// the simulator must refuse each on the contract (or Firecracker's documented rule), so the
// client's checks and the simulator's checks agree.
func TestContractViolations(t *testing.T) {
	e := newSimEnv(t, shortDir(t))
	raw := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://localhost"+path, strings.NewReader(body))
		must(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := e.client.hc.Do(req)
		must(t, err)
		defer resp.Body.Close()
		var f struct {
			FaultMessage string `json:"fault_message"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&f)
		return resp.StatusCode, f.FaultMessage
	}
	tests := []struct {
		name, method, path, body, want string
	}{
		{"vcpu_count 0", "PUT", "/machine-config", `{"vcpu_count":0,"mem_size_mib":64}`, "contract"},
		{"vcpu_count 33", "PUT", "/machine-config", `{"vcpu_count":33,"mem_size_mib":64}`, "contract"},
		{"vcpu_count odd", "PUT", "/machine-config", `{"vcpu_count":3,"mem_size_mib":64}`, "1 or an even number"},
		{"mem_size_mib missing", "PUT", "/machine-config", `{"vcpu_count":1}`, "contract"},
		{"vcpu_count a string", "PUT", "/machine-config", `{"vcpu_count":"2","mem_size_mib":64}`, "contract"},
		{"unknown field", "PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":64,"vcpus":1}`, "contract"},
		{"boot-source without kernel", "PUT", "/boot-source", `{"boot_args":"console=ttyS0"}`, "contract"},
		{"drive without is_root_device", "PUT", "/drives/rootfs", `{"drive_id":"rootfs","path_on_host":"/x"}`, "contract"},
		{"drive id mismatch", "PUT", "/drives/a", `{"drive_id":"b","path_on_host":"/dev/null","is_root_device":false}`, "does not match"},
		{"bad cache_type", "PUT", "/drives/a", `{"drive_id":"a","path_on_host":"/dev/null","is_root_device":false,"cache_type":"Fast"}`, "contract"},
		{"iface without host_dev_name", "PUT", "/network-interfaces/eth0", `{"iface_id":"eth0"}`, "contract"},
		{"mtu 10", "PUT", "/network-interfaces/eth0", `{"iface_id":"eth0","host_dev_name":"tap0","mtu":10}`, "contract"},
		{"guest_cid 2", "PUT", "/vsock", `{"guest_cid":2,"uds_path":"/tmp/x.sock"}`, "contract"},
		{"unknown action", "PUT", "/actions", `{"action_type":"Reboot"}`, "contract"},
		{"vm state Stopped", "PATCH", "/vm", `{"state":"Stopped"}`, "contract"},
		{"snapshot without mem file", "PUT", "/snapshot/create", `{"snapshot_path":"/tmp/s"}`, "contract"},
		{"snapshot type Partial", "PUT", "/snapshot/create", `{"snapshot_path":"/tmp/s","mem_file_path":"/tmp/m","snapshot_type":"Partial"}`, "contract"},
		{"override without iface", "PUT", "/snapshot/load", `{"snapshot_path":"/tmp/s","mem_file_path":"/tmp/m","network_overrides":[{"host_dev_name":"tap0"}]}`, "contract"},
		{"no body", "PUT", "/machine-config", ``, "contract"},
		{"not JSON", "PUT", "/machine-config", `vcpu_count=1`, "contract"},
		{"unknown path", "PUT", "/machine", `{}`, "contract"},
		{"wrong method", "POST", "/actions", `{"action_type":"InstanceStart"}`, "contract"},
		{"GET with a body", "GET", "/", `{"x":1}`, "contract"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, msg := raw(tt.method, tt.path, tt.body)
			if status != http.StatusBadRequest || !strings.Contains(msg, tt.want) {
				t.Fatalf("%s %s %s: got %d %q, want 400 containing %q", tt.method, tt.path, tt.body, status, msg, tt.want)
			}
		})
	}
	// None of it changed the instance.
	if info, err := e.client.Describe(context.Background()); err != nil || info.State != StateNotStarted {
		t.Fatalf("after refused requests: got %+v, %v; want %q", info, err, StateNotStarted)
	}
}

// TestClientValidation: inputs the contract refuses never leave the client; each error names
// the field and wraps driver.ErrInvalid, and the simulator's log stays empty.
func TestClientValidation(t *testing.T) {
	ctx := context.Background()
	e := newSimEnv(t, shortDir(t))
	c := e.client
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"vcpu 0", func() error { return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 0, MemSizeMiB: 64}) }, "vcpu_count 0"},
		{"vcpu 3", func() error { return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 3, MemSizeMiB: 64}) }, "vcpu_count 3"},
		{"vcpu 34", func() error { return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 34, MemSizeMiB: 64}) }, "vcpu_count 34"},
		{"mem 0", func() error { return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: 1}) }, "mem_size_mib 0"},
		{"relative kernel", func() error { return c.PutBootSource(ctx, BootSource{KernelImagePath: "vmlinux"}) }, "kernel_image_path"},
		{"relative initrd", func() error {
			return c.PutBootSource(ctx, BootSource{KernelImagePath: "/k", InitrdPath: "../i"})
		}, "initrd_path"},
		{"drive id with slash", func() error { return c.PutDrive(ctx, Drive{DriveID: "a/b", PathOnHost: "/x"}) }, "drive_id"},
		{"empty drive id", func() error { return c.PutDrive(ctx, Drive{PathOnHost: "/x"}) }, "drive_id"},
		{"drive path relative", func() error { return c.PutDrive(ctx, Drive{DriveID: "a", PathOnHost: "x"}) }, "path_on_host"},
		{"iface id with dash", func() error {
			return c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth-0", HostDevName: "tap0"})
		}, "iface_id"},
		{"long TAP name", func() error {
			return c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "tap0123456789abcdef"})
		}, "host_dev_name"},
		{"multicast MAC", func() error {
			return c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "tap0", GuestMAC: "01:00:5e:00:00:01"})
		}, "guest_mac"},
		{"bad MAC", func() error {
			return c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "tap0", GuestMAC: "02:00"})
		}, "guest_mac"},
		{"mtu 10", func() error {
			return c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: "eth0", HostDevName: "tap0", MTU: 10})
		}, "mtu 10"},
		{"cid 2", func() error { return c.PutVsock(ctx, Vsock{GuestCID: 2, UDSPath: "/tmp/v.sock"}) }, "guest_cid 2"},
		{"long uds_path", func() error {
			return c.PutVsock(ctx, Vsock{GuestCID: 3, UDSPath: "/" + strings.Repeat("v", 120)})
		}, "uds_path"},
		{"vm state", func() error { return c.PatchVM(ctx, "Stopped") }, `"Stopped"`},
		{"snapshot type", func() error {
			return c.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: "/s", MemFilePath: "/m", SnapshotType: "Partial"})
		}, "snapshot_type"},
		{"snapshot relative", func() error {
			return c.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: "s", MemFilePath: "/m"})
		}, "snapshot_path"},
		{"override twice", func() error {
			return c.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: "/s", MemFilePath: "/m", NetworkOverrides: []NetworkOverride{
				{IfaceID: "eth0", HostDevName: "tap0"}, {IfaceID: "eth0", HostDevName: "tap1"}}})
		}, "overridden twice"},
		{"override bad TAP", func() error {
			return c.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: "/s", MemFilePath: "/m", NetworkOverrides: []NetworkOverride{
				{IfaceID: "eth0", HostDevName: "a/b"}}})
		}, "host_dev_name"},
		{"mem file missing", func() error { return c.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: "/s"}) }, "mem_file_path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want driver.ErrInvalid naming %q", err, tt.want)
			}
		})
	}
	if got := e.log.ops(t); len(got) != 0 {
		t.Fatalf("invalid requests reached the API: %v", got)
	}
}

func TestUnavailableSocket(t *testing.T) {
	c, err := NewClient(filepath.Join(shortDir(t), "absent.sock"))
	must(t, err)
	_, err = c.Describe(context.Background())
	if !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("got %v, want driver.ErrUnavailable", err)
	}
	if _, err := NewClient("relative.sock"); !errors.Is(err, driver.ErrInvalid) {
		t.Fatalf("NewClient(relative): got %v, want driver.ErrInvalid", err)
	}
}
