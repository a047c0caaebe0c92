package drivertest

import (
	"errors"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var policyCases = []Case{
	{Name: "policy/lifecycle-and-ownership", Caps: []driver.Capability{driver.CapPolicy}, Run: policyLifecycle},
	{Name: "policy/foreign-object-with-our-name", Caps: []driver.Capability{driver.CapPolicy}, Run: policyForeign},
	{Name: "policy/unreachable-is-unknown", Caps: []driver.Capability{driver.CapPolicy}, Run: policyUnreachable},
}

// policyNode is a started node with one attachment, on h's node driver, for policies.
func policyNode(t T, h *Harness, topo string) (substrate.Handle, []substrate.AttachmentState) {
	t.Helper()
	o := owner(topo, "sysbox_node", "fw")
	node, _ := startedNode(t, h, o)
	_, st := attach(t, h, node, o, network(t, h, topo, testCIDR))
	return node, []substrate.AttachmentState{st}
}

// appliedPolicy is a firewall applied to a fresh policy node.
type appliedPolicy struct {
	p    driver.Policy
	node substrate.Handle
	atts []substrate.AttachmentState
	spec substrate.PolicySpec
	h    substrate.Handle
}

func applyPolicy(t T, h *Harness, topo string) appliedPolicy {
	t.Helper()
	a := appliedPolicy{p: capOf[driver.Policy](t, h.Driver, driver.CapPolicy), spec: firewall(topo, 22)}
	a.node, a.atts = policyNode(t, h, topo)
	var err error
	if a.h, err = a.p.ApplyPolicy(ctxFor(t), a.node, a.atts, a.spec); err != nil {
		t.Fatalf("ApplyPolicy: %v", err)
	}
	return a
}

func firewall(topo string, port int) substrate.PolicySpec {
	return substrate.PolicySpec{Owner: owner(topo, "sysbox_firewall", "fw"), Firewall: &substrate.Firewall{
		DefaultInput: "drop", DefaultForward: "drop", DefaultOutput: "accept",
		Rules: []substrate.Rule{{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: port, Attachment: "eth0"}},
	}}
}

// policyLifecycle: an applied policy is Present, another spec sees it Drifted, re-applying
// replaces it in place, no other owner deletes it, its owner does and it is Absent.
func policyLifecycle(t T, h *Harness) {
	ctx := ctxFor(t)
	topo := h.Topology(t)
	a := applyPolicy(t, h, topo)
	p, node, atts, spec, ph := a.p, a.node, a.atts, a.spec, a.h
	obs, err := p.ObservePolicy(ctx, node, ph, atts, spec)
	wantStatus(t, "ObservePolicy", obs, err, substrate.Present)
	changed := firewall(topo, 23)
	obs, err = p.ObservePolicy(ctx, node, ph, atts, changed)
	wantStatus(t, "ObservePolicy against a changed spec", obs, err, substrate.Drifted)
	again, err := p.ApplyPolicy(ctx, node, atts, changed)
	if err != nil || again.ExternalID != ph.ExternalID {
		t.Fatalf("ApplyPolicy of a changed spec: got %q, %v; want the same table %q replaced", again.ExternalID, err, ph.ExternalID)
	}
	obs, err = p.ObservePolicy(ctx, node, again, atts, changed)
	wantStatus(t, "ObservePolicy after replacing", obs, err, substrate.Present)
	for what, other := range others(spec.Owner) {
		wantNotOwned(t, "DeletePolicy as "+what, p.DeletePolicy(ctx, node, again, other))
	}
	obs, err = p.ObservePolicy(ctx, node, again, atts, changed)
	wantStatus(t, "ObservePolicy after refused deletes", obs, err, substrate.Present)
	if err := p.DeletePolicy(ctx, node, again, spec.Owner); err != nil {
		t.Fatalf("DeletePolicy by its owner: %v", err)
	}
	obs, err = p.ObservePolicy(ctx, node, again, atts, changed)
	wantStatus(t, "ObservePolicy after delete", obs, err, substrate.Absent)
	goneOK(t, "DeletePolicy", p.DeletePolicy(ctx, node, again, spec.Owner))
}

func policyForeign(t T, h *Harness) {
	ctx := ctxFor(t)
	p := capOf[driver.Policy](t, h.Driver, driver.CapPolicy)
	topo := h.Topology(t)
	node, atts := policyNode(t, h, topo)
	spec := firewall(topo, 22)
	intact := h.Foreign(t, ForeignPolicy, spec.Owner, node)
	ph, err := p.ApplyPolicy(ctx, node, atts, spec)
	switch {
	case err == nil:
		if !intact() {
			t.Fatalf("ApplyPolicy replaced the foreign table holding its name (handle %s)", ph.ExternalID)
		}
		if err := p.DeletePolicy(ctx, node, ph, spec.Owner); err != nil {
			t.Fatalf("DeletePolicy of the policy applied beside a foreign table: %v", err)
		}
	case !errors.Is(err, driver.ErrNotOwned):
		t.Errorf("ApplyPolicy over a foreign table: got %v, want an error wrapping driver.ErrNotOwned (or a table elsewhere)", err)
	}
	if !intact() {
		t.Fatalf("the foreign table holding the policy's name was changed or removed")
	}
}

func policyUnreachable(t T, h *Harness) {
	ctx := ctxFor(t)
	a := applyPolicy(t, h, h.Topology(t))
	p, node, atts, spec, ph := a.p, a.node, a.atts, a.spec, a.h
	u, restore := h.unreachable(t, driver.CapPolicy)
	if u == nil {
		return
	}
	up := capOf[driver.Policy](t, u, driver.CapPolicy)
	obs, err := up.ObservePolicy(ctx, node, ph, atts, spec)
	wantUnknown(t, "ObservePolicy", obs, err)
	wantRefusedUnreachable(t, "DeletePolicy", up.DeletePolicy(ctx, node, ph, spec.Owner))
	restore()
	obs, err = p.ObservePolicy(ctx, node, ph, atts, spec)
	wantStatus(t, "ObservePolicy once the backend is back", obs, err, substrate.Present)
	if err := p.DeletePolicy(ctx, node, ph, spec.Owner); err != nil {
		t.Fatalf("DeletePolicy: %v", err)
	}
}
