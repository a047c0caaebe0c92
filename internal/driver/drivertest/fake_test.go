package drivertest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/pkg/substrate"
)

// fakeHarness runs the suite on d, which is f or f wrapped by a broken variant.
func fakeHarness(d driver.Driver, f *fake.Driver) drivertest.Harness {
	kinds := map[string]string{drivertest.ForeignNode: fake.KindNode, drivertest.ForeignNetwork: fake.KindNetwork, drivertest.ForeignPolicy: fake.KindPolicy}
	return drivertest.Harness{
		Driver:   d,
		Topology: func(drivertest.T) string { return drivertest.RandomTopology() },
		NodeSpec: func(_ drivertest.T, o substrate.Owner) substrate.NodeSpec {
			return substrate.NodeSpec{Owner: o, Driver: fake.Name, Command: []string{"sleep", "3600"}}
		},
		Unreachable: func(drivertest.T) (driver.Driver, func()) {
			f.SetUnavailable(true)
			return d, func() { f.SetUnavailable(false) }
		},
		Foreign: func(t drivertest.T, kind string, o substrate.Owner, node substrate.Handle) func() bool {
			id, err := f.AddForeignAt(kinds[kind], o, node.ExternalID)
			if err != nil {
				t.Fatalf("foreign %s: %v", kind, err)
			}
			return func() bool {
				w := f.World()
				switch kind {
				case drivertest.ForeignNode:
					return w.Nodes[id] != nil && w.Nodes[id].Marker == "" && w.Nodes[id].Running
				case drivertest.ForeignNetwork:
					return w.Networks[id] != nil && w.Networks[id].Marker == ""
				}
				return w.Policies[id] != nil && w.Policies[id].Marker == "" && w.Policies[id].Digest == "foreign"
			}
		},
		Artifact: func(t drivertest.T) substrate.ArtifactSpec {
			if err := f.SetArtifact("conform.rootfs", "rootfs content"); err != nil {
				t.Fatalf("artifact: %v", err)
			}
			return substrate.ArtifactSpec{Kind: "rootfs", Source: "conform.rootfs"}
		},
	}
}

func newFake(t *testing.T) *fake.Driver {
	t.Helper()
	f, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestConformanceFake runs the driver conformance suite on the fake (unit tier).
func TestConformanceFake(t *testing.T) {
	f := newFake(t)
	drivertest.Run(t, fakeHarness(f, f))
}

// Broken variants of the fake, each violating one rule the suite checks.
type (
	// deleteIgnoresOwner deletes a node whatever the caller's owner is.
	deleteIgnoresOwner struct{ *fake.Driver }
	// absentWhenUnreachable reports a node it cannot see as absent.
	absentWhenUnreachable struct{ *fake.Driver }
	// resetKeepsID hands back the prior object as the new generation.
	resetKeepsID struct{ *fake.Driver }
	// blindAudit finds no residue.
	blindAudit struct{ *fake.Driver }
	// adoptsForeign takes over an unmarked node holding its name.
	adoptsForeign struct{ *fake.Driver }
	// detachIgnoresOwner detaches a NIC whatever the caller's owner is.
	detachIgnoresOwner struct{ *fake.Driver }
	// resetMovesMAC gives the new generation's attachment another MAC.
	resetMovesMAC struct{ *fake.Driver }
)

func (b deleteIgnoresOwner) DeleteNode(ctx context.Context, h substrate.Handle, _ substrate.Owner) error {
	n := b.World().Nodes[h.ExternalID]
	if n == nil {
		return nil
	}
	return b.Driver.DeleteNode(ctx, h, n.Owner)
}

func (b absentWhenUnreachable) ObserveNode(ctx context.Context, h substrate.Handle, o substrate.Owner) (substrate.Observation, error) {
	obs, err := b.Driver.ObserveNode(ctx, h, o)
	if err != nil {
		return substrate.Observation{Status: substrate.Absent, ExternalID: h.ExternalID}, nil
	}
	return obs, nil
}

func (b resetKeepsID) NewGeneration(ctx context.Context, prior substrate.Handle, priorOwner substrate.Owner, spec substrate.NodeSpec) (substrate.Handle, error) {
	if _, err := b.Driver.NewGeneration(ctx, prior, priorOwner, spec); err != nil {
		return substrate.Handle{}, err
	}
	return prior, nil
}

func (blindAudit) Residue(context.Context, string) ([]substrate.Object, error) { return nil, nil }

func (b adoptsForeign) CreateNode(ctx context.Context, spec substrate.NodeSpec) (substrate.Handle, error) {
	h, err := b.Driver.CreateNode(ctx, spec)
	if !errors.Is(err, driver.ErrNotOwned) {
		return h, err
	}
	for id, n := range b.World().Nodes {
		if n.Foreign && n.Marker == "" {
			if err := b.SetMarker(id, spec.Owner.Marker()); err != nil {
				return substrate.Handle{}, err
			}
		}
	}
	return b.Driver.CreateNode(ctx, spec)
}

func (b detachIgnoresOwner) Detach(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, _ substrate.Owner) error {
	for _, c := range b.World().NICs {
		if c.Node == node.ExternalID && c.Name == st.Name {
			return b.Driver.Detach(ctx, node, st, c.Owner)
		}
	}
	return nil
}

func (b resetMovesMAC) Attach(ctx context.Context, node substrate.Handle, spec substrate.AttachmentSpec) (substrate.AttachmentState, error) {
	if spec.Owner.Generation > 1 {
		spec.MAC = "02:00:00:00:00:99"
	}
	return b.Driver.Attach(ctx, node, spec)
}

// TestSuiteCatchesBrokenDrivers proves that the suite can fail: each broken variant of the
// fake must fail the case that checks the rule it breaks, and the correct fake fails none.
func TestSuiteCatchesBrokenDrivers(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*fake.Driver) driver.Driver
		want string // a case that must fail
	}{
		{"correct fake", func(f *fake.Driver) driver.Driver { return f }, ""},
		{"delete ignores owner", func(f *fake.Driver) driver.Driver { return deleteIgnoresOwner{f} }, "nodes/lifecycle-and-ownership"},
		{"absent when unreachable", func(f *fake.Driver) driver.Driver { return absentWhenUnreachable{f} }, "nodes/unreachable-is-unknown"},
		{"reset keeps external id", func(f *fake.Driver) driver.Driver { return resetKeepsID{f} }, "reset/keeps-addresses-changes-external-id"},
		{"audit finds nothing", func(f *fake.Driver) driver.Driver { return blindAudit{f} }, "audit/finds-residue"},
		{"adopts a foreign node", func(f *fake.Driver) driver.Driver { return adoptsForeign{f} }, "nodes/foreign-object-with-our-name"},
		{"detach ignores owner", func(f *fake.Driver) driver.Driver { return detachIgnoresOwner{f} }, "nics/lifecycle-and-ownership"},
		{"reset moves the MAC", func(f *fake.Driver) driver.Driver { return resetMovesMAC{f} }, "reset/keeps-addresses-changes-external-id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			failures := drivertest.Check(fakeHarness(tc.wrap(f), f))
			var names []string
			for _, fl := range failures {
				names = append(names, fl.Case)
				t.Logf("%s: %s", fl.Case, strings.Join(fl.Messages, "; "))
			}
			if tc.want == "" {
				if len(failures) != 0 {
					t.Fatalf("the correct fake fails %v", names)
				}
				return
			}
			for _, n := range names {
				if n == tc.want {
					return
				}
			}
			t.Fatalf("broken variant passes %s (failed cases: %v)", tc.want, names)
		})
	}
}
