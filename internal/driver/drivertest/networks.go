package drivertest

import (
	"errors"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var networkCases = []Case{
	{Name: "networks/lifecycle-and-ownership", Caps: []driver.Capability{driver.CapManagedNetwork}, Run: networkLifecycle},
	{Name: "networks/foreign-object-with-our-name", Caps: []driver.Capability{driver.CapManagedNetwork}, Run: networkForeign},
	{Name: "networks/unreachable-is-unknown", Caps: []driver.Capability{driver.CapManagedNetwork}, Run: networkUnreachable},
}

// network returns a network for attachments: the harness's, or one the node driver creates.
func network(t T, h *Harness, topology, cidr string) substrate.Handle {
	t.Helper()
	o := owner(topology, "sysbox_network", "lan")
	if h.Network != nil {
		return h.Network(t, o, cidr)
	}
	nw := capOf[driver.Networks](t, h.nodeDriver(), driver.CapManagedNetwork)
	nh, err := nw.CreateNetwork(ctxFor(t), substrate.NetworkSpec{Owner: o, IPv4CIDR: cidr})
	if err != nil {
		t.Fatalf("CreateNetwork(%s): %v", o.Address, err)
	}
	return nh
}

func networkLifecycle(t T, h *Harness) {
	ctx := ctxFor(t)
	nw := capOf[driver.Networks](t, h.Driver, driver.CapManagedNetwork)
	o := owner(h.Topology(t), "sysbox_network", "a")
	spec := substrate.NetworkSpec{Owner: o, IPv4CIDR: "198.51.100.0/24"}
	nh, err := nw.CreateNetwork(ctx, spec)
	if err != nil {
		t.Fatalf("CreateNetwork: %v", err)
	}
	again, err := nw.CreateNetwork(ctx, spec)
	if err != nil || again.ExternalID != nh.ExternalID {
		t.Fatalf("CreateNetwork again for the same owner: got %q, %v; want the same object %q", again.ExternalID, err, nh.ExternalID)
	}
	obs, err := nw.ObserveNetwork(ctx, nh, o)
	wantStatus(t, "ObserveNetwork", obs, err, substrate.Present)
	for what, other := range others(o) {
		obs, err := nw.ObserveNetwork(ctx, nh, other)
		if obs.Status == substrate.Present || obs.Status == substrate.Absent {
			t.Errorf("ObserveNetwork as %s: got %s, %v; want neither present nor absent", what, obs.Status, err)
		}
		wantNotOwned(t, "DeleteNetwork as "+what, nw.DeleteNetwork(ctx, nh, other))
	}
	obs, err = nw.ObserveNetwork(ctx, nh, o)
	wantStatus(t, "ObserveNetwork after refused deletes", obs, err, substrate.Present)
	if err := nw.DeleteNetwork(ctx, nh, o); err != nil {
		t.Fatalf("DeleteNetwork by its owner: %v", err)
	}
	obs, err = nw.ObserveNetwork(ctx, nh, o)
	wantStatus(t, "ObserveNetwork after delete", obs, err, substrate.Absent)
	goneOK(t, "DeleteNetwork", nw.DeleteNetwork(ctx, nh, o))
}

func networkForeign(t T, h *Harness) {
	ctx := ctxFor(t)
	nw := capOf[driver.Networks](t, h.Driver, driver.CapManagedNetwork)
	o := owner(h.Topology(t), "sysbox_network", "b")
	intact := h.Foreign(t, ForeignNetwork, o, substrate.Handle{})
	nh, err := nw.CreateNetwork(ctx, substrate.NetworkSpec{Owner: o, IPv4CIDR: "198.51.100.0/24"})
	switch {
	case err == nil:
		if !intact() {
			t.Fatalf("CreateNetwork took over the foreign object holding its name (handle %s)", nh.ExternalID)
		}
		if err := nw.DeleteNetwork(ctx, nh, o); err != nil {
			t.Fatalf("DeleteNetwork of the network created beside a foreign object: %v", err)
		}
	case !errors.Is(err, driver.ErrNotOwned):
		t.Errorf("CreateNetwork over a foreign object: got %v, want an error wrapping driver.ErrNotOwned (or a network elsewhere)", err)
	}
	if !intact() {
		t.Fatalf("the foreign object holding the network's name was changed or removed")
	}
}

func networkUnreachable(t T, h *Harness) {
	ctx := ctxFor(t)
	nw := capOf[driver.Networks](t, h.Driver, driver.CapManagedNetwork)
	o := owner(h.Topology(t), "sysbox_network", "c")
	nh, err := nw.CreateNetwork(ctx, substrate.NetworkSpec{Owner: o, IPv4CIDR: "198.51.100.0/24"})
	if err != nil {
		t.Fatalf("CreateNetwork: %v", err)
	}
	u, restore := h.unreachable(t, driver.CapManagedNetwork)
	if u == nil {
		_ = nw.DeleteNetwork(ctx, nh, o)
		return
	}
	un := capOf[driver.Networks](t, u, driver.CapManagedNetwork)
	obs, err := un.ObserveNetwork(ctx, nh, o)
	wantUnknown(t, "ObserveNetwork", obs, err)
	wantRefusedUnreachable(t, "DeleteNetwork", un.DeleteNetwork(ctx, nh, o))
	restore()
	obs, err = nw.ObserveNetwork(ctx, nh, o)
	wantStatus(t, "ObserveNetwork once the backend is back", obs, err, substrate.Present)
	if err := nw.DeleteNetwork(ctx, nh, o); err != nil {
		t.Fatalf("DeleteNetwork: %v", err)
	}
}
