package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
)

// maxSunPath is the longest unix socket path the kernel accepts (sun_path is 108 bytes with the
// terminating NUL).
const maxSunPath = 107

// maxResponse bounds what the client reads of one API response; Firecracker's bodies are a few
// hundred bytes.
const maxResponse = 1 << 20

// APIError is a non-2xx answer of the Firecracker API. FaultMessage is the contract's
// Error.fault_message, verbatim.
type APIError struct {
	Method       string
	Path         string
	Status       int
	FaultMessage string
}

func (e *APIError) Error() string {
	msg := e.FaultMessage
	if msg == "" {
		msg = "(no fault_message)"
	}
	return fmt.Sprintf("firecracker API %s %s: HTTP %d: %s", e.Method, e.Path, e.Status, msg)
}

// Client speaks the Firecracker API over one process's unix socket (HTTP/1.1). It validates every
// request against the contract's rules before sending, so an invalid body is a driver.ErrInvalid
// naming the field and never reaches the VMM. It is safe for concurrent use.
type Client struct {
	sock string
	hc   *http.Client
}

// NewClient returns a client for the API socket at sock. It does not connect.
func NewClient(sock string) (*Client, error) {
	if err := checkSocketPath("api socket", sock); err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableCompression: true,
		MaxIdleConns:       1,
	}
	return &Client{sock: sock, hc: &http.Client{Transport: tr}}, nil
}

// Socket is the API socket path the client talks to.
func (c *Client) Socket() string { return c.sock }

// Close drops idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

// PutMachineConfig sends PUT /machine-config. Pre-boot only.
func (c *Client) PutMachineConfig(ctx context.Context, m MachineConfig) error {
	if err := m.validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, "/machine-config", m, nil)
}

// PutBootSource sends PUT /boot-source. Pre-boot only.
func (c *Client) PutBootSource(ctx context.Context, b BootSource) error {
	if err := b.validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, "/boot-source", b, nil)
}

// PutDrive sends PUT /drives/{drive_id}. Pre-boot only.
func (c *Client) PutDrive(ctx context.Context, d Drive) error {
	if err := d.validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, "/drives/"+url.PathEscape(d.DriveID), d, nil)
}

// PatchDrive sends PATCH /drives/{drive_id} with a new path_on_host. Post-boot only (a
// restored guest is "booted"): the VMM reopens the drive on that file.
func (c *Client) PatchDrive(ctx context.Context, driveID, pathOnHost string) error {
	d := Drive{DriveID: driveID, PathOnHost: pathOnHost}
	if err := d.validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPatch, "/drives/"+url.PathEscape(driveID), partialDrive{DriveID: driveID, PathOnHost: pathOnHost}, nil)
}

// PutNetworkInterface sends PUT /network-interfaces/{iface_id}. Pre-boot only; the TAP named
// HostDevName must already exist (Firecracker never creates one).
func (c *Client) PutNetworkInterface(ctx context.Context, n NetworkInterface) error {
	if err := n.validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, "/network-interfaces/"+url.PathEscape(n.IfaceID), n, nil)
}

// PutVsock sends PUT /vsock. Pre-boot only.
func (c *Client) PutVsock(ctx context.Context, v Vsock) error {
	if err := v.validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, "/vsock", v, nil)
}

// InstanceStart sends PUT /actions {"action_type":"InstanceStart"}.
func (c *Client) InstanceStart(ctx context.Context) error {
	return c.do(ctx, http.MethodPut, "/actions", instanceAction{ActionType: "InstanceStart"}, nil)
}

// PatchVM sends PATCH /vm with the desired state (Paused or Resumed).
func (c *Client) PatchVM(ctx context.Context, s VMState) error {
	if s != VMPaused && s != VMResumed {
		return fmt.Errorf("firecracker: vm: state %q: want %q or %q: %w", s, VMPaused, VMResumed, driver.ErrInvalid)
	}
	return c.do(ctx, http.MethodPatch, "/vm", vmBody{State: s}, nil)
}

// CreateSnapshot sends PUT /snapshot/create. The VM must be Paused.
func (c *Client) CreateSnapshot(ctx context.Context, s SnapshotCreate) error {
	if err := s.validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, "/snapshot/create", s, nil)
}

// LoadSnapshot sends PUT /snapshot/load. Only a fresh process accepts it.
func (c *Client) LoadSnapshot(ctx context.Context, s SnapshotLoad) error {
	if err := s.validate(); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, "/snapshot/load", s, nil)
}

// Describe sends GET / and returns the instance information.
func (c *Client) Describe(ctx context.Context) (InstanceInfo, error) {
	var info InstanceInfo
	if err := c.do(ctx, http.MethodGet, "/", nil, &info); err != nil {
		return InstanceInfo{}, err
	}
	switch info.State {
	case StateNotStarted, StateRunning, StatePaused:
	default:
		return InstanceInfo{}, fmt.Errorf("firecracker API GET / on %s: state %q is none of the contract's", c.sock, info.State)
	}
	return info, nil
}

// do sends one request. A connection failure wraps driver.ErrUnavailable (the VMM is gone or
// not yet listening); a non-2xx answer is an *APIError.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("firecracker API %s %s: encode: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	// The host part is never dialled (DialContext goes to the socket); "localhost" is what the
	// contract's host says.
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, rd)
	if err != nil {
		return fmt.Errorf("firecracker API %s %s: %w", method, path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("firecracker API %s %s on %s: %w", method, path, c.sock, ctx.Err())
		}
		return fmt.Errorf("firecracker API %s %s on %s: %v: %w", method, path, c.sock, err, driver.ErrUnavailable)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return fmt.Errorf("firecracker API %s %s on %s: read response: %v: %w", method, path, c.sock, err, driver.ErrUnavailable)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e apiErrorBody
		if err := json.Unmarshal(data, &e); err != nil || e.FaultMessage == "" {
			e.FaultMessage = strings.TrimSpace(string(data))
		}
		return &APIError{Method: method, Path: path, Status: resp.StatusCode, FaultMessage: e.FaultMessage}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("firecracker API %s %s on %s: decode response: %w", method, path, c.sock, err)
		}
	}
	return nil
}

// Validation. Each rule is the contract's (schema or documented behaviour); the error names the
// resource, the field and the value.

func invalid(resource, format string, args ...any) error {
	return fmt.Errorf("firecracker: %s: %s: %w", resource, fmt.Sprintf(format, args...), driver.ErrInvalid)
}

func (m MachineConfig) validate() error {
	if m.VCPUCount < 1 || m.VCPUCount > 32 || (m.VCPUCount != 1 && m.VCPUCount%2 != 0) {
		return invalid("machine-config", "vcpu_count %d: must be 1 or an even number, at most 32", m.VCPUCount)
	}
	if m.MemSizeMiB < 1 {
		return invalid("machine-config", "mem_size_mib %d: must be positive", m.MemSizeMiB)
	}
	return nil
}

func (b BootSource) validate() error {
	if err := checkHostPath("boot-source", "kernel_image_path", b.KernelImagePath); err != nil {
		return err
	}
	if b.InitrdPath != "" {
		return checkHostPath("boot-source", "initrd_path", b.InitrdPath)
	}
	return nil
}

func (d Drive) validate() error {
	if err := checkID("drive", "drive_id", d.DriveID); err != nil {
		return err
	}
	return checkHostPath("drive "+d.DriveID, "path_on_host", d.PathOnHost)
}

func (n NetworkInterface) validate() error {
	if err := checkID("network-interface", "iface_id", n.IfaceID); err != nil {
		return err
	}
	res := "network-interface " + n.IfaceID
	if err := checkIfName(res, n.HostDevName); err != nil {
		return err
	}
	if n.GuestMAC != "" {
		mac, err := net.ParseMAC(n.GuestMAC)
		if err != nil || len(mac) != 6 || mac[0]&1 != 0 {
			return invalid(res, "guest_mac %q: want a unicast 48-bit MAC like 02:00:00:00:00:01", n.GuestMAC)
		}
	}
	if n.MTU != 0 && (n.MTU < 68 || n.MTU > 65535) {
		return invalid(res, "mtu %d: must be within 68..65535", n.MTU)
	}
	return nil
}

func (v Vsock) validate() error {
	if v.GuestCID < 3 {
		return invalid("vsock", "guest_cid %d: must be at least 3 (0-2 are reserved)", v.GuestCID)
	}
	return checkSocketPath("vsock uds_path", v.UDSPath)
}

func (s SnapshotCreate) validate() error {
	if err := checkHostPath("snapshot/create", "snapshot_path", s.SnapshotPath); err != nil {
		return err
	}
	if err := checkHostPath("snapshot/create", "mem_file_path", s.MemFilePath); err != nil {
		return err
	}
	if s.SnapshotType != "" && s.SnapshotType != "Full" && s.SnapshotType != "Diff" {
		return invalid("snapshot/create", "snapshot_type %q: want Full or Diff", s.SnapshotType)
	}
	return nil
}

func (s SnapshotLoad) validate() error {
	if err := checkHostPath("snapshot/load", "snapshot_path", s.SnapshotPath); err != nil {
		return err
	}
	if err := checkHostPath("snapshot/load", "mem_file_path", s.MemFilePath); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, o := range s.NetworkOverrides {
		res := fmt.Sprintf("snapshot/load network_overrides[%d]", i)
		if err := checkID(res, "iface_id", o.IfaceID); err != nil {
			return err
		}
		if seen[o.IfaceID] {
			return invalid(res, "iface_id %q: overridden twice", o.IfaceID)
		}
		seen[o.IfaceID] = true
		if err := checkIfName(res, o.HostDevName); err != nil {
			return err
		}
	}
	if s.VsockOverride != nil {
		return checkSocketPath("snapshot/load vsock_override uds_path", s.VsockOverride.UDSPath)
	}
	return nil
}

// checkID enforces Firecracker's resource id rule: 1-64 ASCII letters, digits or '_'.
func checkID(res, field, id string) error {
	if id == "" || len(id) > 64 {
		return invalid(res, "%s %q: must be 1-64 characters", field, id)
	}
	for _, r := range id {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return invalid(res, "%s %q: only letters, digits and '_' are allowed", field, id)
		}
	}
	return nil
}

// checkIfName enforces a Linux interface name: 1-15 bytes, no '/', whitespace or ':'.
func checkIfName(res, name string) error {
	if name == "" || len(name) > 15 || name == "." || name == ".." || strings.ContainsAny(name, "/: \t\n") {
		return invalid(res, "host_dev_name %q: not a Linux interface name (1-15 bytes, no '/', ':' or space)", name)
	}
	return nil
}

func checkHostPath(res, field, p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return invalid(res, "%s %q: must be an absolute, clean path", field, p)
	}
	return nil
}

func checkSocketPath(what, p string) error {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return fmt.Errorf("firecracker: %s %q: must be an absolute, clean path: %w", what, p, driver.ErrInvalid)
	}
	if len(p) > maxSunPath {
		return fmt.Errorf("firecracker: %s %q: %d bytes, a unix socket path holds at most %d: %w", what, p, len(p), maxSunPath, driver.ErrInvalid)
	}
	return nil
}
