package drivertest

import (
	"slices"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var auditCases = []Case{
	{Name: "audit/finds-residue", Caps: []driver.Capability{driver.CapAudit}, Run: auditResidue},
	{Name: "audit/unreachable-is-an-error", Caps: []driver.Capability{driver.CapAudit}, Run: auditUnreachable},
}

// made is one object a case created through the driver, and how to delete it.
type made struct {
	owner  substrate.Owner
	delete func() error
}

// makeAuditable creates one object of each kind the driver itself manages (node, network,
// policy) so that the audit has something to find.
func makeAuditable(t T, h *Harness, topo string) []made {
	t.Helper()
	ctx := ctxFor(t)
	caps := h.Driver.Descriptor().Capabilities
	var out []made
	if slices.Contains(caps, driver.CapManagedNetwork) {
		nw := capOf[driver.Networks](t, h.Driver, driver.CapManagedNetwork)
		o := owner(topo, "sysbox_network", "audited")
		nh, err := nw.CreateNetwork(ctx, substrate.NetworkSpec{Owner: o, IPv4CIDR: "203.0.113.0/24"})
		if err != nil {
			t.Fatalf("CreateNetwork: %v", err)
		}
		out = append(out, made{o, func() error { return nw.DeleteNetwork(ctx, nh, o) }})
	}
	if slices.Contains(caps, driver.CapNodeLifecycle) {
		n := capOf[driver.Nodes](t, h.Driver, driver.CapNodeLifecycle)
		o := owner(topo, "sysbox_node", "audited")
		hd, _ := startedNode(t, h, o)
		// Nodes go first: a network may refuse deletion while a node is still attached.
		out = append([]made{{o, func() error { return n.DeleteNode(ctx, hd, o) }}}, out...)
	}
	if slices.Contains(caps, driver.CapPolicy) {
		a := applyPolicy(t, h, topo)
		out = append(out, made{a.spec.Owner, func() error { return a.p.DeletePolicy(ctx, a.node, a.h, a.spec.Owner) }})
	}
	if len(out) == 0 {
		t.Fatalf("driver %s audits but manages no object the suite can create", h.Driver.Descriptor().Name)
	}
	return out
}

// auditResidue: every object the driver created for a topology is in its residue with its
// owner; another topology's audit lists none of them; after deletion none is left.
func auditResidue(t T, h *Harness) {
	a := capOf[driver.Auditor](t, h.Driver, driver.CapAudit)
	topo := h.Topology(t)
	objs := makeAuditable(t, h, topo)
	for _, m := range objs {
		if got := residueOf(t, a, topo, m.owner); len(got) == 0 {
			t.Errorf("Residue(%s): nothing for %s, which exists", topo, m.owner.Address)
		}
	}
	other := topo + "-other"
	if got, err := a.Residue(ctxFor(t), other); err != nil || len(got) != 0 {
		t.Errorf("Residue(%s) of a topology with no objects: got %s, %v; want none", other, describe(got), err)
	}
	for _, m := range objs {
		if err := m.delete(); err != nil {
			t.Fatalf("delete %s: %v", m.owner.Address, err)
		}
	}
	for _, m := range objs {
		if got := residueOf(t, a, topo, m.owner); len(got) != 0 {
			t.Errorf("Residue(%s) after deleting %s: %s left", topo, m.owner.Address, describe(got))
		}
	}
}

// auditUnreachable: an audit that cannot see the backend fails; an empty list would claim
// that nothing is left.
func auditUnreachable(t T, h *Harness) {
	topo := h.Topology(t)
	objs := makeAuditable(t, h, topo)
	u, restore := h.unreachable(t, driver.CapAudit)
	if u == nil {
		return
	}
	ua := capOf[driver.Auditor](t, u, driver.CapAudit)
	if got, err := ua.Residue(ctxFor(t), topo); err == nil {
		t.Errorf("Residue(%s) with the backend unreachable: got %s and no error; want an error (a silent empty list claims there is no residue)", topo, describe(got))
	}
	restore()
	for _, m := range objs {
		if err := m.delete(); err != nil {
			t.Fatalf("delete %s: %v", m.owner.Address, err)
		}
	}
}
