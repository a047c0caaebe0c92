package netns

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Name is the driver's registry name.
const Name = "netns"

// Version goes into plan fingerprints; bump it when behaviour visible to plans changes.
const Version = "1"

const (
	envelopeVersion = 1
	kindNode        = "node"
	kindAttachment  = "attachment"
	kindNetwork     = substrate.NetworkHandleKindBridge
)

// Driver implements the netns node driver and the Linux-bridge managed network.
type Driver struct {
	// NetnsDir holds the namespaces' bind mounts (default /run/netns, shared with `ip netns`).
	NetnsDir string
	// StateDir holds sidecar records and main-process logs (default /run/sysbox/netns).
	StateDir string

	// fresh holds freshKey(name, inode) of the namespaces this Driver created and has not
	// started a process in yet: nothing it did not record can run inside them, so their first
	// StartNode skips the search for an unrecorded main process (a scan of /proc per node,
	// which made apply O(N²)). In memory only: after a crash a new process knows none.
	fresh sync.Map

	temps tempIndex // temporary files of killed sidecar writes (leftovers.go)

	conns connCache // open namespaces of the nodes being worked on (conns.go)

	// wired remembers, by namespace name, what this Driver configured inside a namespace it
	// created or wired moments before, so that ConfigureGuestNetwork does not redo it. Taken
	// by ConfigureGuestNetwork, dropped by DeleteNode. In memory only.
	wiredMu sync.Mutex
	wired   map[string]*wiredNs

	hosts hostsMemo // what SetHosts read and wrote (hosts.go)
}

// wiredNs is what this Driver itself configured in one namespace (inode ino): loopback up
// (when it created the namespace) and, by interface name, the exact addresses it set on each
// interface it brought up.
type wiredNs struct {
	ino  uint64
	loUp bool
	ifs  map[string][]string // node interface name → its IPv4 prefixes
}

// noteWired records that this Driver brought loopback up in namespace name (inode ino), or
// wired interface ifName with exactly ipv4 (ifName != "").
func (d *Driver) noteWired(name string, ino uint64, ifName string, ipv4 []string) {
	d.wiredMu.Lock()
	defer d.wiredMu.Unlock()
	if d.wired == nil {
		d.wired = map[string]*wiredNs{}
	}
	w := d.wired[name]
	if w == nil || w.ino != ino {
		w = &wiredNs{ino: ino, ifs: map[string][]string{}}
		d.wired[name] = w
	}
	if ifName == "" {
		w.loUp = true
		return
	}
	w.ifs[ifName] = slices.Clone(ipv4)
}

// takeWired returns and forgets what this Driver configured in namespace name with inode ino.
func (d *Driver) takeWired(name string, ino uint64) *wiredNs {
	d.wiredMu.Lock()
	defer d.wiredMu.Unlock()
	w := d.wired[name]
	delete(d.wired, name)
	if w == nil || w.ino != ino {
		return nil
	}
	return w
}

func (d *Driver) dropWired(name string) {
	d.wiredMu.Lock()
	defer d.wiredMu.Unlock()
	delete(d.wired, name)
}

func freshKey(name string, ino uint64) string { return name + "@" + strconv.FormatUint(ino, 10) }

// intentDir holds linuxnet intent records for links this driver creates.
func (d *Driver) intentDir() string { return filepath.Join(d.StateDir, "intents") }

// New returns the driver with default directories.
func New() *Driver {
	return &Driver{NetnsDir: "/run/netns", StateDir: "/run/sysbox/netns"}
}

// Register adds a default netns driver to r.
func Register(r *driver.Registry) error { return r.Register(New()) }

var (
	_ driver.Networks            = (*Driver)(nil)
	_ driver.Nodes               = (*Driver)(nil)
	_ driver.NICs                = (*Driver)(nil)
	_ driver.NodeState           = (*Driver)(nil)
	_ driver.GuestExec           = (*Driver)(nil)
	_ driver.Resetter            = (*Driver)(nil)
	_ driver.Importer            = (*Driver)(nil)
	_ driver.NetworkImporter     = (*Driver)(nil)
	_ driver.Hosts               = (*Driver)(nil)
	_ driver.Auditor             = (*Driver)(nil)
	_ linuxnet.NamespaceResolver = (*Driver)(nil)
)

// Descriptor implements driver.Driver.
func (d *Driver) Descriptor() driver.Descriptor {
	return driver.Descriptor{Name: Name, Version: Version, Capabilities: []driver.Capability{
		driver.CapManagedNetwork, driver.CapNodeLifecycle, driver.CapNIC, driver.CapNodeState,
		driver.CapGuestExec, driver.CapReset, driver.CapImport, driver.CapAudit,
	}}
}

// ensureRuntime runs before the driver's first record is written (every path that writes
// starts with CreateNetwork, CreateNode or ImportNode in the process that writes).
// linuxnet.PrepareStateDir leaves a StateDir outside its runtime root (a test's) alone.
func (d *Driver) ensureRuntime() { linuxnet.PrepareStateDir(d.StateDir) }

// private is the versioned provider-private payload of every handle and attachment this driver
// returns. Kind says which fields matter.
type private struct {
	Kind string `json:"kind"`
	// node
	Netns   string `json:"netns,omitempty"`    // namespace name under NetnsDir
	NsInode uint64 `json:"ns_inode,omitempty"` // nsfs inode at creation
	// network
	Bridge   string `json:"bridge,omitempty"`
	IPv4CIDR string `json:"ipv4_cidr,omitempty"`
	// attachment
	Veth *linuxnet.Veth `json:"veth,omitempty"`
}

func encode(p private) substrate.Envelope {
	b, _ := json.Marshal(p)
	return substrate.Envelope{Driver: Name, Version: envelopeVersion, Data: b}
}

func decode(env substrate.Envelope, kind string) (private, error) {
	var p private
	if env.Driver != Name {
		return p, fmt.Errorf("private state: written by driver %q, not %q", env.Driver, Name)
	}
	if env.Version < 1 || env.Version > envelopeVersion {
		return p, fmt.Errorf("private state: version %d unknown to driver %s %s (knows 1..%d): upgrade sysbox", env.Version, Name, Version, envelopeVersion)
	}
	if err := json.Unmarshal(env.Data, &p); err != nil {
		return p, fmt.Errorf("private state: %w", err)
	}
	if kind != "" && p.Kind != kind {
		return p, fmt.Errorf("private state: a %s envelope where a %s is expected", p.Kind, kind)
	}
	switch p.Kind {
	case kindNode:
		if p.Netns == "" {
			return p, fmt.Errorf("private state: node envelope lacks the namespace name")
		}
	case kindNetwork:
		if p.Bridge == "" {
			return p, fmt.Errorf("private state: network envelope lacks the bridge name")
		}
	case kindAttachment:
		if p.Veth == nil || p.Veth.HostName == "" || p.Veth.NodeName == "" {
			return p, fmt.Errorf("private state: attachment envelope lacks the veth names")
		}
	default:
		return p, fmt.Errorf("private state: unknown kind %q", p.Kind)
	}
	return p, nil
}

// CheckPrivate implements driver.NodeState: it refuses envelopes of unknown versions or lacking
// the names this driver needs to find and verify its objects.
func (d *Driver) CheckPrivate(env substrate.Envelope) error {
	_, err := decode(env, "")
	return err
}

// netnsPrefix begins every NetnsName.
const netnsPrefix = "sb-"

// NetnsName is the namespace name for an owner's generation.
func NetnsName(o substrate.Owner) string {
	return netnsPrefix + o.ShortID(10) + "-g" + strconv.FormatUint(o.Generation, 10)
}

// BridgeName is the bridge name for a network owner.
func BridgeName(o substrate.Owner) string { return "sbr" + o.ShortID(12) }

// HostVethName is the host-side veth name of one attachment of one generation.
func HostVethName(o substrate.Owner, attachment string) string {
	return linuxnet.IfName("sv", o.Topology, o.Address, o.Type, attachment, strconv.FormatUint(o.Generation, 10))
}

// NodeIfName is the interface name inside the node: the logical attachment name when it is a
// valid interface name, else a hash of it. The runtime never sees it.
func NodeIfName(attachment string) string {
	if linuxnet.ValidIfName(attachment) && attachment[0] != '-' {
		return attachment
	}
	return linuxnet.IfName("n", attachment)
}
