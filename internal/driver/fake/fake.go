package fake

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Name is the fake driver's default registry name.
const Name = "fake"

// EnvFailpoints names the environment variable New reads failpoints from (see ParseFailpoints).
const EnvFailpoints = "SYSBOX_FAKE_FAILPOINTS"

const (
	worldKind    = "sysbox-fake-world"
	worldVersion = 1
	envVersion   = 1
)

// Object kinds as reported by Residue.
const (
	KindNetwork = "fake-network"
	KindNode    = "fake-node"
	KindNIC     = "fake-nic"
	KindPolicy  = "fake-policy"
)

// World is everything the fake holds. Tests may read it through Driver.World.
type World struct {
	Networks map[string]*Network `json:"networks"`
	Nodes    map[string]*Node    `json:"nodes"`
	NICs     map[string]*NIC     `json:"nics"`
	Policies map[string]*Policy  `json:"policies"`
	// Artifacts maps an artifact source to its content; a source not listed has content equal
	// to its own name.
	Artifacts map[string]string `json:"artifacts,omitempty"`
	// Mutations counts successful mutating calls over the world's life.
	Mutations uint64 `json:"mutations"`
}

// Network is a managed network object.
type Network struct {
	ID     string          `json:"id"`
	Marker string          `json:"marker"` // Owner.Marker(), "" for a foreign object
	Owner  substrate.Owner `json:"owner"`
	CIDR   string          `json:"cidr"`
}

// Node is a node object.
type Node struct {
	ID       string            `json:"id"`
	Marker   string            `json:"marker"`
	Owner    substrate.Owner   `json:"owner"`
	Running  bool              `json:"running"`
	Quiesced bool              `json:"quiesced,omitempty"` // a prior generation during reset
	Digest   string            `json:"digest,omitempty"`   // artifact digest it was created from
	Command  []string          `json:"command,omitempty"`
	EnvKeys  []string          `json:"env_keys,omitempty"` // names only, never values
	Routes   []substrate.Route `json:"routes,omitempty"`
	Foreign  bool              `json:"foreign,omitempty"` // created by AddForeignNode, not by sysbox
	// Hosts is what SetHosts last gave the node: address → names.
	Hosts map[string][]string `json:"hosts,omitempty"`
}

// NIC is the physical side of one attachment.
type NIC struct {
	ID      string          `json:"id"`
	Marker  string          `json:"marker"`
	Owner   substrate.Owner `json:"owner"`
	Node    string          `json:"node"`
	Name    string          `json:"name"`
	Network string          `json:"network"`
	MAC     string          `json:"mac"`
	IPv4    []string        `json:"ipv4,omitempty"`
	Up      bool            `json:"up"`
}

// Policy is an installed policy table.
type Policy struct {
	ID     string          `json:"id"`
	Marker string          `json:"marker"`
	Owner  substrate.Owner `json:"owner"`
	Node   string          `json:"node"`
	Digest string          `json:"digest"`
}

// Driver is the fake. Its zero value is not usable; call New.
type Driver struct {
	mu    sync.Mutex
	name  string
	path  string
	world World
	fps   []*Failpoint
	hits  map[string]int
	calls []string

	unavailable bool
	lastEnv     map[string]map[string]string // node id -> environment seen at create (memory only)

	// Indexes (memory only, rebuilt on load) keep per-call work independent of world size.
	byNode map[string]map[string]bool // node id -> ids of its NICs and policies
	byMAC  map[string]map[string]bool // network id + "|" + MAC -> NIC ids
}

var (
	_ driver.Driver    = (*Driver)(nil)
	_ driver.Artifacts = (*Driver)(nil)
	_ driver.Networks  = (*Driver)(nil)
	_ driver.Nodes     = (*Driver)(nil)
	_ driver.NICs      = (*Driver)(nil)
	_ driver.NodeState = (*Driver)(nil)
	_ driver.GuestExec = (*Driver)(nil)
	_ driver.Policy    = (*Driver)(nil)
	_ driver.Resetter  = (*Driver)(nil)
	_ driver.Importer  = (*Driver)(nil)
	_ driver.Auditor   = (*Driver)(nil)
)

// Options configure New.
type Options struct {
	Name string // registry name; "" means "fake"
	// Path, when set, persists the world there (read at New, rewritten after every mutation).
	Path string
	// Failpoints in the SYSBOX_FAKE_FAILPOINTS syntax; New also appends that variable's value.
	Failpoints string
}

// New returns a fake driver, loading the world from opts.Path if it exists.
func New(opts Options) (*Driver, error) {
	d := &Driver{name: opts.Name, path: opts.Path, hits: map[string]int{}, lastEnv: map[string]map[string]string{}}
	if d.name == "" {
		d.name = Name
	}
	d.world = World{Networks: map[string]*Network{}, Nodes: map[string]*Node{}, NICs: map[string]*NIC{}, Policies: map[string]*Policy{}}
	if d.path != "" {
		b, err := os.ReadFile(d.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("fake driver: %w", err)
		default:
			if _, err := durable.DecodeRecord(b, worldKind, worldVersion, &d.world); err != nil {
				return nil, fmt.Errorf("fake driver: world %s: %w", d.path, err)
			}
			d.world.fill()
		}
	}
	d.reindex()
	for _, spec := range []string{opts.Failpoints, os.Getenv(EnvFailpoints)} {
		fps, err := ParseFailpoints(spec)
		if err != nil {
			return nil, fmt.Errorf("fake driver: %w", err)
		}
		d.fps = append(d.fps, fps...)
	}
	return d, nil
}

func (w *World) fill() {
	if w.Networks == nil {
		w.Networks = map[string]*Network{}
	}
	if w.Nodes == nil {
		w.Nodes = map[string]*Node{}
	}
	if w.NICs == nil {
		w.NICs = map[string]*NIC{}
	}
	if w.Policies == nil {
		w.Policies = map[string]*Policy{}
	}
}

// Register registers a fake driver persisted at path ("" for memory only) under the name "fake".
func Register(r *driver.Registry, path string) (*Driver, error) {
	d, err := New(Options{Path: path})
	if err != nil {
		return nil, err
	}
	return d, r.Register(d)
}

// Descriptor declares every capability.
func (d *Driver) Descriptor() driver.Descriptor {
	return driver.Descriptor{Name: d.name, Version: "1", Capabilities: []driver.Capability{
		driver.CapArtifact, driver.CapManagedNetwork, driver.CapNodeLifecycle, driver.CapNIC,
		driver.CapNodeState, driver.CapGuestExec, driver.CapPolicy, driver.CapReset,
		driver.CapImport, driver.CapAudit,
	}}
}

// Alias is the fake registered under another name, sharing the fake's world, so that tests and
// the CLI's test mode can stand in for "netns", "nftables" or "docker" (whose names the
// configuration language accepts).
type Alias struct {
	*Driver
	name string
}

// As returns d under another registry name.
func (d *Driver) As(name string) *Alias { return &Alias{Driver: d, name: name} }

// Descriptor renames the fake's descriptor.
func (a *Alias) Descriptor() driver.Descriptor {
	desc := a.Driver.Descriptor()
	desc.Name = a.name
	return desc
}

// StandIn returns a registry in which one fake, persisted at path, is registered under each of
// names (the CLI's test mode: the fake stands in for the built-in drivers).
func StandIn(path string, names ...string) (*driver.Registry, error) {
	d, err := New(Options{Path: path})
	if err != nil {
		return nil, err
	}
	r := driver.NewRegistry()
	for _, name := range names {
		if err := r.Register(d.As(name)); err != nil {
			return nil, err
		}
	}
	return r, nil
}
