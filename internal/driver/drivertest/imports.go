package drivertest

import (
	"errors"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Import cases run for each kind a driver can adopt (the interface it implements beside
// declaring CapImport).
var importCases = []Case{
	{Name: "import/network-ownership", Caps: []driver.Capability{driver.CapManagedNetwork, driver.CapImport},
		Applies: implementsIface[driver.NetworkImporter], Run: importNetwork},
	{Name: "import/policy-ownership", Caps: []driver.Capability{driver.CapPolicy, driver.CapImport},
		Applies: implementsIface[driver.PolicyImporter], Run: importPolicy},
}

func implementsIface[C any](d driver.Driver) bool { _, ok := d.(C); return ok }

// wantRefusedNaming fails unless err wraps ErrNotOwned and names whose object it is.
func wantRefusedNaming(t T, what string, err error, whose substrate.Owner) {
	t.Helper()
	wantNotOwned(t, what, err)
	if !strings.Contains(err.Error(), whose.Address) || !strings.Contains(err.Error(), whose.Topology) {
		t.Errorf("%s: error %q does not say whose the object is (%s of topology %s)", what, err, whose.Address, whose.Topology)
	}
}

// importNetwork: a network's own object is adopted again by its resource (same handle,
// present); a resource of another address or topology is refused, told whose it is; a missing
// object is ErrNotFound.
func importNetwork(t T, h *Harness) {
	ctx := ctxFor(t)
	nw := capOf[driver.Networks](t, h.Driver, driver.CapManagedNetwork)
	imp := capOf[driver.NetworkImporter](t, h.Driver, driver.CapImport)
	o := owner(h.Topology(t), "sysbox_network", "imp")
	spec := substrate.NetworkSpec{Owner: o, IPv4CIDR: "198.51.100.0/24"}
	nh, err := nw.CreateNetwork(ctx, spec)
	if err != nil {
		t.Fatalf("CreateNetwork: %v", err)
	}
	t.Cleanup(func() { _ = nw.DeleteNetwork(ctxFor(t), nh, o) })
	for what, other := range others(o) {
		if what == "next generation" || what == "incomplete evidence" {
			continue // the same resource may adopt any generation; incomplete is refused below
		}
		s := spec
		s.Owner = other
		_, err := imp.ImportNetwork(ctx, nh.ExternalID, s)
		wantRefusedNaming(t, "ImportNetwork as "+what, err, o)
	}
	incomplete := spec
	incomplete.Owner.Topology = ""
	_, err = imp.ImportNetwork(ctx, nh.ExternalID, incomplete)
	wantNotOwned(t, "ImportNetwork with incomplete evidence", err)
	got, err := imp.ImportNetwork(ctx, nh.ExternalID, spec)
	if err != nil || got.ExternalID != nh.ExternalID {
		t.Fatalf("ImportNetwork by its own resource: got %q, %v; want %q", got.ExternalID, err, nh.ExternalID)
	}
	obs, err := nw.ObserveNetwork(ctx, got, o)
	wantStatus(t, "ObserveNetwork of the imported network", obs, err, substrate.Present)
	if _, err := imp.ImportNetwork(ctx, "sbmissing0", spec); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("ImportNetwork of a missing object: got %v, want driver.ErrNotFound", err)
	}
	if err := nw.DeleteNetwork(ctx, got, o); err != nil {
		t.Fatalf("DeleteNetwork of the imported network: %v", err)
	}
}

// importPolicy: the policy's own table is adopted by its resource untouched (present); a
// resource of another address or topology is refused, told whose it is; a missing table is
// ErrNotFound.
func importPolicy(t T, h *Harness) {
	ctx := ctxFor(t)
	imp := capOf[driver.PolicyImporter](t, h.Driver, driver.CapImport)
	a := applyPolicy(t, h, h.Topology(t))
	for what, other := range others(a.spec.Owner) {
		if what == "next generation" || what == "incomplete evidence" {
			continue
		}
		s := a.spec
		s.Owner = other
		_, err := imp.ImportPolicy(ctx, a.node, a.h.ExternalID, a.atts, s)
		wantRefusedNaming(t, "ImportPolicy as "+what, err, a.spec.Owner)
	}
	got, err := imp.ImportPolicy(ctx, a.node, a.h.ExternalID, a.atts, a.spec)
	if err != nil || got.ExternalID != a.h.ExternalID {
		t.Fatalf("ImportPolicy by its own resource: got %q, %v; want %q", got.ExternalID, err, a.h.ExternalID)
	}
	obs, err := a.p.ObservePolicy(ctx, a.node, got, a.atts, a.spec)
	wantStatus(t, "ObservePolicy of the imported policy", obs, err, substrate.Present)
	if _, err := imp.ImportPolicy(ctx, a.node, "sysbox_missing0", a.atts, a.spec); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("ImportPolicy of a missing table: got %v, want driver.ErrNotFound", err)
	}
	if err := a.p.DeletePolicy(ctx, a.node, got, a.spec.Owner); err != nil {
		t.Fatalf("DeletePolicy of the imported policy: %v", err)
	}
}
