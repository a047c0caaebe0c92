package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// fileStore is a minimal file-backed StateStore for tests (the real ones live in
// internal/backend): durable writes, a flock, CAS on the serial, snapshots as copies.
type fileStore struct {
	dir string

	mu        sync.Mutex
	saves     int
	snapshots int
	failSave  error
}

func newFileStore(dir string) *fileStore { return &fileStore{dir: dir} }

func (f *fileStore) path() string { return filepath.Join(f.dir, "state.json") }

func (f *fileStore) Lock(ctx context.Context, op string) (func() error, error) {
	l, err := durable.Lock(filepath.Join(f.dir, "state.lock"))
	if err != nil {
		return nil, err
	}
	return l.Unlock, nil
}

func (f *fileStore) Read(ctx context.Context) (*states.State, error) {
	b, err := os.ReadFile(f.path())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return states.Decode(b)
}

func (f *fileStore) Save(ctx context.Context, st *states.State, expect uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failSave != nil {
		return f.failSave
	}
	cur, err := f.Read(ctx)
	if err != nil {
		return err
	}
	var serial uint64
	if cur != nil {
		serial = cur.Serial
		if cur.Lineage != st.Lineage {
			return fmt.Errorf("lineage %s != %s", cur.Lineage, st.Lineage)
		}
	}
	if serial != expect {
		return fmt.Errorf("conflict: expected serial %d, stored %d", expect, serial)
	}
	b, err := states.Encode(st)
	if err != nil {
		return err
	}
	f.saves++
	return durable.WriteFile(f.path(), b, 0o600)
}

func (f *fileStore) Snapshot(ctx context.Context, reason string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path())
	if err != nil {
		return err
	}
	f.snapshots++
	return durable.WriteFile(filepath.Join(f.dir, fmt.Sprintf("snapshot-%d.json", f.snapshots)), b, 0o600)
}

// ---- a small topology and a tiny planner for tests ----

func mustAddr(s string) addrs.Instance { return addrs.MustParseInstance(s) }

// topology is a desired configuration: nets networks, nodes nodes (node i attached to network
// i%nets with a fixed MAC/IP), one firewall on node 0, one artifact.
func topology(nets, nodes int, withFirewall bool) []Action {
	art := &substrate.ArtifactIdentity{Kind: "rootfs", Source: "./rootfs.tar", Digest: fakeDigest("./rootfs.tar")}
	var out []Action
	out = append(out, Action{Addr: mustAddr("sysbox_artifact.rootfs"), Kind: specs.KindArtifact, Driver: "fake",
		Artifact: &substrate.ArtifactSpec{Kind: "rootfs", Source: "./rootfs.tar"}})
	for i := 0; i < nets; i++ {
		out = append(out, Action{Addr: mustAddr(fmt.Sprintf("sysbox_network.lan[%d]", i)), Kind: specs.KindNetwork, Driver: "fake",
			Network: &substrate.NetworkSpec{IPv4CIDR: fmt.Sprintf("198.18.%d.0/24", i)}})
	}
	for i := 0; i < nodes; i++ {
		n := i % nets
		netAddr := mustAddr(fmt.Sprintf("sysbox_network.lan[%d]", n))
		out = append(out, Action{Addr: mustAddr(fmt.Sprintf("sysbox_node.web[%d]", i)), Kind: specs.KindNode, Driver: "fake",
			Deps: []addrs.Instance{netAddr, mustAddr("sysbox_artifact.rootfs")},
			Node: &specs.NodeSpec{
				Spec:        substrate.NodeSpec{Artifact: art, Command: []string{"sleep", "infinity"}},
				Environment: map[string]string{"TOKEN": "secret://env/WEB_TOKEN", "MODE": "lab"},
				Attachments: []specs.Attachment{{Name: "lan", Network: netAddr, MAC: fmt.Sprintf("02:00:00:00:%02x:%02x", i/256, i%256),
					IPv4: []string{fmt.Sprintf("198.18.%d.%d/24", n, 10+i/nets)}}},
				Routes: []substrate.Route{{To: "0.0.0.0/0", Via: fmt.Sprintf("198.18.%d.1", n)}},
			}})
	}
	if withFirewall && nodes > 0 {
		out = append(out, Action{Addr: mustAddr("sysbox_firewall.web0"), Kind: specs.KindPolicy, Driver: "fake",
			Deps: []addrs.Instance{mustAddr("sysbox_node.web[0]")},
			Policy: &specs.PolicySpec{Node: mustAddr("sysbox_node.web[0]"), Spec: substrate.PolicySpec{Firewall: &substrate.Firewall{
				DefaultInput: "drop", DefaultForward: "accept", DefaultOutput: "accept",
				Rules: []substrate.Rule{{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 80, Attachment: "lan"}}}}}})
	}
	return out
}

func fakeDigest(content string) string {
	return fakeSHA(content)
}

// planFor is a tiny planner: create what state lacks, no-op what it has (present), delete what
// desired lacks; replace the addresses in replace.
func planFor(st *states.State, desired []Action, replace ...string) []Action {
	rep := map[string]bool{}
	for _, r := range replace {
		rep[r] = true
	}
	want := map[string]bool{}
	var out []Action
	for _, d := range desired {
		want[d.Addr.String()] = true
		a := d
		switch cur := stateResource(st, d.Addr); {
		case cur == nil:
			a.Op, a.Reason = plans.Create, "not in state"
		case rep[d.Addr.String()]:
			a.Op, a.Reason = plans.Replace, "replace requested"
		default:
			a.Op, a.Reason = plans.NoOp, "up to date"
		}
		out = append(out, a)
	}
	if st != nil {
		for _, r := range st.Resources {
			if !want[r.Addr.String()] {
				out = append(out, Action{Addr: r.Addr, Op: plans.Delete, Reason: "not in configuration",
					Kind: kindOf(r.Addr), Driver: r.Driver, Deps: r.Dependencies})
			}
		}
	}
	return out
}

func stateResource(st *states.State, a addrs.Instance) *states.Resource {
	if st == nil {
		return nil
	}
	return st.Resource(a)
}

// kindOf is the built-in handlers' kind of addr's type.
func kindOf(addr addrs.Instance) specs.Kind {
	k, _ := handlers.Builtin().Kind(addr.Resource.Type)
	return k
}
