package drivertest

import (
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var resetCases = []Case{
	{Name: "reset/keeps-addresses-changes-external-id", Caps: []driver.Capability{driver.CapNodeLifecycle, driver.CapNIC, driver.CapReset}, Run: resetGeneration},
}

// resetGeneration: NewGeneration creates a new object (another external id) for the next
// generation, keeps the prior one until the executor deletes it, and lets the replacement take
// the same MAC and addresses on the same network; deleting the prior one leaves the new one.
func resetGeneration(t T, h *Harness) {
	ctx := ctxFor(t)
	n := capOf[driver.Nodes](t, h.Driver, driver.CapNodeLifecycle)
	nics := capOf[driver.NICs](t, h.Driver, driver.CapNIC)
	r := capOf[driver.Resetter](t, h.Driver, driver.CapReset)
	topo := h.Topology(t)
	o1 := owner(topo, "sysbox_node", "a")
	nh := network(t, h, topo, testCIDR)
	h1, spec1, aspec, st1 := wiredNode(t, h, o1, nh)

	if _, err := r.NewGeneration(ctx, h1, o1, spec1); err == nil {
		t.Fatalf("NewGeneration to the same generation %d: accepted, want an error", o1.Generation)
	}
	o2 := o1
	o2.Generation++
	spec2 := h.NodeSpec(t, o2)
	h2, err := r.NewGeneration(ctx, h1, o1, spec2)
	if err != nil {
		t.Fatalf("NewGeneration: %v", err)
	}
	if h2.ExternalID == "" || h2.ExternalID == h1.ExternalID {
		t.Fatalf("NewGeneration: external id %q, want a new one (prior %q)", h2.ExternalID, h1.ExternalID)
	}
	if obs, err := n.ObserveNode(ctx, h1, o1); obs.Status == substrate.Absent {
		t.Fatalf("prior generation after NewGeneration: absent (%v); it must stay until deleted", err)
	}
	aspec.Owner = o2
	st2, err := nics.Attach(ctx, h2, aspec)
	if err != nil {
		t.Fatalf("Attach of the new generation with the prior's MAC and addresses: %v", err)
	}
	sameAddresses(t, "new generation's attachment", st2, st1.MAC, st1.IPv4)
	if err := n.StartNode(ctx, h2, spec2); err != nil {
		t.Fatalf("StartNode(new generation): %v", err)
	}
	wantNotOwned(t, "DeleteNode(prior) as the new generation", n.DeleteNode(ctx, h1, o2))
	if err := n.DeleteNode(ctx, h1, o1); err != nil {
		t.Fatalf("DeleteNode(prior generation): %v", err)
	}
	obs, err := n.ObserveNode(ctx, h2, o2)
	wantStatus(t, "new generation after the prior's deletion", obs, err, substrate.Present)
	obs, err = nics.ObserveAttachment(ctx, h2, st2, o2)
	wantStatus(t, "new generation's attachment after the prior's deletion", obs, err, substrate.Present)
	if err := n.DeleteNode(ctx, h2, o2); err != nil {
		t.Fatalf("DeleteNode(new generation): %v", err)
	}
}
