package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Name is the driver's registry name.
const Name = "docker"

// Version goes into the stored-plan fingerprint; bump it when behaviour visible to plans changes.
const Version = "0.1.0"

// APIVersion is the Docker Engine API version the client speaks. Engine 20.10 serves 1.41, and
// every later engine still accepts it, so the driver pins it rather than negotiating.
const APIVersion = "1.41"

// Options configure a Driver.
type Options struct {
	// Host is the daemon address, e.g. "unix:///var/run/docker.sock". Empty means DOCKER_HOST,
	// or the default socket.
	Host string
	// StopTimeout bounds a graceful stop before the daemon kills the container (default 2s).
	StopTimeout time.Duration
	// StateDir holds the per-container NIC records ObserveNode compares with the container's
	// namespace (default DefaultStateDir).
	StateDir string
}

// Driver implements the docker driver's capabilities. It is safe for concurrent use.
type Driver struct {
	cli         *client.Client
	stopTimeout time.Duration
	stateDir    string
	sidecarMu   [64]sync.Mutex // NIC records' locks, by container id (sidecarLock)
	owners      ownerCache     // container id → owner its labels name (see owners.go)
	live        liveCache      // container id → running instance last seen (see live.go)
}

// New returns a driver talking to the daemon at opts.Host. It does not contact the daemon.
func New(opts Options) (*Driver, error) {
	cli, err := newClient(opts.Host)
	if err != nil {
		return nil, fmt.Errorf("docker driver: client: %w", err)
	}
	d := &Driver{cli: cli, stopTimeout: opts.StopTimeout, stateDir: opts.StateDir}
	if d.stateDir == "" {
		d.stateDir = DefaultStateDir
	}
	if d.stopTimeout <= 0 {
		d.stopTimeout = 2 * time.Second
	}
	return d, nil
}

// newClient returns a client for host, or for DOCKER_HOST (else the default socket) when host
// is empty.
func newClient(host string) (*client.Client, error) {
	copts := []client.Opt{client.FromEnv, client.WithVersion(APIVersion)}
	if host != "" {
		copts = append(copts, client.WithHost(host))
	}
	return client.NewClientWithOpts(copts...)
}

// Register adds a docker driver using the default daemon address to r.
func Register(r *driver.Registry) error {
	d, err := New(Options{})
	if err != nil {
		return err
	}
	return r.Register(d)
}

// Close releases the client's idle connections.
func (d *Driver) Close() error { return d.cli.Close() }

// Descriptor declares the capabilities below.
func (d *Driver) Descriptor() driver.Descriptor {
	return driver.Descriptor{Name: Name, Version: Version, Capabilities: []driver.Capability{
		driver.CapArtifact, driver.CapNodeLifecycle, driver.CapNIC, driver.CapNodeState,
		driver.CapGuestExec, driver.CapReset, driver.CapImport, driver.CapAudit,
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
	_ driver.Importer  = (*Driver)(nil)
	_ driver.Auditor   = (*Driver)(nil)

	_ driver.ForceDeleter = (*Driver)(nil)
	_ driver.NICRemover   = (*Driver)(nil)
	_ driver.Concurrency  = (*Driver)(nil)

	_ linuxnet.NamespaceResolver = (*Driver)(nil)
)

// MaxInFlight is how many operations the driver runs at once when the user did not fix the
// parallelism (driver.Concurrency). An operation spends most of its time waiting on the daemon
// (a container's start or removal), which serves many at once: `docker rm -f` of many
// containers keeps up to 50 removals in flight.
const MaxInFlight = 32

// MaxInFlight implements driver.Concurrency.
func (d *Driver) MaxInFlight() int { return MaxInFlight }

// DeleteStopsNode implements driver.ForceDeleter: DeleteNode removes a running container with
// force (the daemon kills it), so the executor does not stop it gracefully first.
func (d *Driver) DeleteStopsNode() bool { return true }

// DeleteRemovesNICs implements driver.NICRemover: removing a container takes its veth pairs
// with its namespace (the kernel tears the namespace's devices down in one batch), and
// DeleteNode then deletes the host sides its record still finds, as Detach would.
func (d *Driver) DeleteRemovesNICs() bool { return true }

// apiErr maps a client error to the driver sentinels callers branch on, keeping the cause:
// an unreachable daemon is ErrUnavailable, a missing object ErrNotFound.
func apiErr(what string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errdefs.IsNotFound(err):
		return fmt.Errorf("%s: %w: %w", what, driver.ErrNotFound, err)
	case unreachable(err):
		return fmt.Errorf("%s: docker daemon unreachable: %w: %w", what, driver.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func unreachable(err error) bool {
	if client.IsErrConnectionFailed(err) {
		return true
	}
	var ne *net.OpError
	if errors.As(err, &ne) {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) ||
		errors.Is(err, os.ErrNotExist) || errors.Is(err, context.DeadlineExceeded) ||
		errdefs.IsUnavailable(err)
}

// observedAt stamps observations in UTC.
func observedAt() time.Time { return time.Now().UTC() }

// unknown is the observation for an object the driver cannot see right now.
func unknown(id string, err error) substrate.Observation {
	return substrate.Observation{Status: substrate.Unknown, Reason: err.Error(), ExternalID: id, At: observedAt()}
}

// NodeNetns returns the running container's network namespace (/proc/PID/ns/net), so that the
// nftables policy driver can act inside it (linuxnet.NamespaceResolver). A container that is gone
// or not running has no namespace: ErrNotFound (so its policy is absent, not unknown); an
// unreachable daemon is ErrUnavailable.
func (d *Driver) NodeNetns(ctx context.Context, node substrate.Handle) (linuxnet.Netns, error) {
	ins, err := d.cli.ContainerInspect(ctx, node.ExternalID)
	if err != nil {
		return linuxnet.Netns{}, d.containerErr("network namespace of container "+short(node.ExternalID), node.ExternalID, err)
	}
	if ins.State == nil || !ins.State.Running || ins.State.Pid <= 0 {
		return linuxnet.Netns{}, fmt.Errorf("network namespace of container %s: not running, so it has none: %w", short(ins.ID), driver.ErrNotFound)
	}
	return linuxnet.PidNetns(ins.State.Pid), nil
}
