package libvirt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"

	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Name is the driver's registry name.
const Name = "libvirt"

// Version goes into the stored-plan fingerprint (with the domain type appended, see Descriptor);
// bump it when behaviour visible to plans changes.
const Version = "0.1.0"

// DefaultSocket is libvirtd's read-write socket for qemu:///system.
const DefaultSocket = "/run/libvirt/libvirt-sock"

// EnvSocket overrides the socket when Options.Socket is empty (as DOCKER_HOST does for docker).
const EnvSocket = "SYSBOX_LIBVIRT_SOCKET"

// DefaultStateDir holds the artifact store and the overlays. Its directories are 0755: QEMU runs
// as libvirt-qemu and must traverse them (libvirt's dynamic_ownership chowns only the files).
const DefaultStateDir = "/var/lib/sysbox/libvirt"

// Domain types.
const (
	TypeQEMU = "qemu" // TCG: always works, slower
	TypeKVM  = "kvm"
)

// Options configure a Driver.
type Options struct {
	// Socket is libvirtd's unix socket (default: $SYSBOX_LIBVIRT_SOCKET, else DefaultSocket).
	Socket string
	// StateDir holds the artifact store and per-generation overlays (default DefaultStateDir).
	StateDir string
	// DomainType forces "qemu" or "kvm"; empty probes the host (ProbeDomainType).
	DomainType string
	// ReadyTimeout bounds the wait for the guest agent to answer guest-ping after a start
	// (default 120s: a TCG boot takes 4-8 s, more under load). Negative: do not wait (an image
	// without a guest agent; Exec and guest network configuration then fail).
	ReadyTimeout time.Duration
	// QEMUImg is the qemu-img binary (default "qemu-img").
	QEMUImg string
	// NoSnapshot turns the reset fast path off: no baseline snapshot is taken at a node's first
	// start (which saves ~2 s there) and every reset boots cold.
	NoSnapshot bool
	// OnStep, when set, is called after each step of creating, starting and resetting a node
	// with the node's address, the step's name and how long it took (the benchmark prints
	// them). It may be called from several goroutines at once.
	OnStep func(address, step string, took time.Duration)

	dial func() (conn, error) // tests: a fake connection
}

// conn is the part of go-libvirt the driver uses; *golibvirt.Libvirt implements it, and unit
// tests hand in a fake.
type conn interface {
	DomainLookupByName(name string) (golibvirt.Domain, error)
	DomainLookupByUUID(uuid golibvirt.UUID) (golibvirt.Domain, error)
	DomainDefineXML(xml string) (golibvirt.Domain, error)
	DomainCreate(d golibvirt.Domain) error
	DomainGetState(d golibvirt.Domain, flags uint32) (int32, int32, error)
	DomainGetXMLDesc(d golibvirt.Domain, flags golibvirt.DomainXMLFlags) (string, error)
	DomainDestroy(d golibvirt.Domain) error
	DomainShutdown(d golibvirt.Domain) error
	DomainUndefineFlags(d golibvirt.Domain, flags golibvirt.DomainUndefineFlagsValues) error
	DomainSave(d golibvirt.Domain, to string) error
	DomainRestore(from string) error
	DomainAttachDeviceFlags(d golibvirt.Domain, xml string, flags uint32) error
	DomainDetachDeviceFlags(d golibvirt.Domain, xml string, flags uint32) error
	ConnectListAllDomains(need int32, flags golibvirt.ConnectListAllDomainsFlags) ([]golibvirt.Domain, uint32, error)
	QEMUDomainAgentCommand(d golibvirt.Domain, cmd string, timeout int32, flags uint32) (golibvirt.OptString, error)
	SubscribeEvents(ctx context.Context, eventID golibvirt.DomainEventID, dom golibvirt.OptDomain) (<-chan interface{}, error)
}

var _ conn = (*golibvirt.Libvirt)(nil)

// Driver implements the libvirt driver's capabilities. It is safe for concurrent use.
type Driver struct {
	socket       string
	stateDir     string
	domainType   string
	readyTimeout time.Duration
	qemuImg      string
	snapshots    bool
	onStep       func(address, step string, took time.Duration)
	agentPoll    time.Duration // tests: longer, to show a wait ended by the connect event
	run          argv.Runner
	dial         func() (conn, error)

	mu   sync.Mutex
	c    conn
	lv   *golibvirt.Libvirt // the real connection behind c, for liveness and Close
	nics sync.Mutex         // serializes tap creation and domain interface edits
	dirs sync.Mutex         // an overlay directory is created and removed (when empty) under it
}

// New returns a driver for libvirtd at opts.Socket. It does not contact the daemon.
func New(opts Options) (*Driver, error) {
	d := &Driver{socket: opts.Socket, stateDir: opts.StateDir, domainType: opts.DomainType,
		readyTimeout: opts.ReadyTimeout, qemuImg: opts.QEMUImg, snapshots: !opts.NoSnapshot, onStep: opts.OnStep, agentPoll: agentPoll, run: argv.Exec{}, dial: opts.dial}
	if d.socket == "" {
		d.socket = os.Getenv(EnvSocket)
	}
	if d.socket == "" {
		d.socket = DefaultSocket
	}
	if d.stateDir == "" {
		d.stateDir = DefaultStateDir
	}
	if d.qemuImg == "" {
		d.qemuImg = "qemu-img"
	}
	if d.readyTimeout == 0 {
		d.readyTimeout = 120 * time.Second
	}
	switch d.domainType {
	case "":
		d.domainType = ProbeDomainType()
	case TypeQEMU, TypeKVM:
	default:
		return nil, fmt.Errorf("libvirt driver: domain type %q: want %q or %q: %w", opts.DomainType, TypeQEMU, TypeKVM, driver.ErrInvalid)
	}
	return d, nil
}

// Register adds a libvirt driver with default options to r.
func Register(r *driver.Registry) error {
	d, err := New(Options{})
	if err != nil {
		return err
	}
	return r.Register(d)
}

// DomainType is the domain type this driver defines ("qemu" or "kvm").
func (d *Driver) DomainType() string { return d.domainType }

// Descriptor declares the capabilities below. The version carries the domain type, so that the
// mode is in every plan's driver fingerprint and shown with it.
func (d *Driver) Descriptor() driver.Descriptor {
	return driver.Descriptor{Name: Name, Version: Version + "+" + d.domainType, Capabilities: []driver.Capability{
		driver.CapArtifact, driver.CapNodeLifecycle, driver.CapNIC, driver.CapNodeState,
		driver.CapGuestExec, driver.CapReset, driver.CapAudit, driver.CapImport,
	}}
}

var (
	_ driver.Driver    = (*Driver)(nil)
	_ driver.Artifacts = (*Driver)(nil)
	_ driver.Nodes     = (*Driver)(nil)
	_ driver.NICs      = (*Driver)(nil)
	_ driver.NodeState = (*Driver)(nil)
	_ driver.GuestExec = (*Driver)(nil)
	_ driver.Resetter  = (*Driver)(nil)
	_ driver.Auditor   = (*Driver)(nil)
)

// ProbeDomainType says which domain type this host can run: "kvm" only when /dev/kvm exists and
// is not KVM_PVM (whose /dev/kvm answers every ioctl but hangs a stock guest kernel at 100 % CPU,
// so its presence proves nothing), else "qemu". It reads two paths and never starts a guest.
func ProbeDomainType() string { return probeDomainType("/dev/kvm", "/sys/module/kvm_pvm") }

func probeDomainType(devKVM, pvmModule string) string {
	if _, err := os.Stat(pvmModule); err == nil {
		return TypeQEMU
	}
	f, err := os.OpenFile(devKVM, os.O_RDWR, 0)
	if err != nil {
		return TypeQEMU
	}
	f.Close()
	return TypeKVM
}

// Close drops the connection to libvirtd.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lv != nil {
		err := d.lv.Disconnect()
		d.lv, d.c = nil, nil
		return err
	}
	d.c = nil
	return nil
}

// conn returns a live connection, dialing (again) when there is none or the last one dropped.
// A daemon that cannot be reached is driver.ErrUnavailable.
func (d *Driver) conn(ctx context.Context) (conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c != nil {
		if d.lv == nil || d.lv.IsConnected() {
			return d.c, nil
		}
		d.c, d.lv = nil, nil
	}
	if d.dial != nil {
		c, err := d.dial()
		if err != nil {
			return nil, fmt.Errorf("libvirtd: %w: %w", driver.ErrUnavailable, err)
		}
		d.c = c
		return c, nil
	}
	lv := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(d.socket), dialers.WithLocalTimeout(5*time.Second)))
	if err := lv.ConnectToURI(golibvirt.QEMUSystem); err != nil {
		return nil, fmt.Errorf("libvirtd at %s: %w: %w", d.socket, driver.ErrUnavailable, err)
	}
	d.c, d.lv = lv, lv
	return lv, nil
}

// apiErr maps a go-libvirt error to the driver sentinels, keeping the cause: libvirt's "no
// domain" is ErrNotFound; anything that is not an error libvirtd answered (a dropped socket) is
// ErrUnavailable.
func apiErr(what string, err error) error {
	if err == nil {
		return nil
	}
	var le golibvirt.Error
	switch {
	case golibvirt.IsNotFound(err):
		return fmt.Errorf("%s: %w: %w", what, driver.ErrNotFound, err)
	case errors.Is(err, driver.ErrUnavailable), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, err)
	case errors.As(err, &le):
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: libvirtd: %w: %w", what, driver.ErrUnavailable, err)
}

// step starts timing one step of address's node; the returned func reports it to OnStep.
func (d *Driver) step(address, name string) func() {
	if d.onStep == nil {
		return func() {}
	}
	t0 := time.Now()
	return func() { d.onStep(address, name, time.Since(t0)) }
}

// observedAt stamps observations in UTC.
func observedAt() time.Time { return time.Now().UTC() }

// unknown is the observation for an object the driver cannot see right now.
func unknown(id string, err error) substrate.Observation {
	return substrate.Observation{Status: substrate.Unknown, Reason: err.Error(), ExternalID: id, At: observedAt()}
}
