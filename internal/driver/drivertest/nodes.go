package drivertest

import (
	"errors"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var nodeCases = []Case{
	{Name: "nodes/lifecycle-and-ownership", Caps: []driver.Capability{driver.CapNodeLifecycle}, Run: nodeLifecycle},
	{Name: "nodes/foreign-object-with-our-name", Caps: []driver.Capability{driver.CapNodeLifecycle}, Run: nodeForeign},
	{Name: "nodes/unreachable-is-unknown", Caps: []driver.Capability{driver.CapNodeLifecycle}, Run: nodeUnreachable},
}

// startedNode creates and starts a node of h's node driver for owner o.
func startedNode(t T, h *Harness, o substrate.Owner) (substrate.Handle, substrate.NodeSpec) {
	t.Helper()
	ctx := ctxFor(t)
	n := capOf[driver.Nodes](t, h.nodeDriver(), driver.CapNodeLifecycle)
	spec := h.NodeSpec(t, o)
	hd, err := n.CreateNode(ctx, spec)
	if err != nil {
		t.Fatalf("CreateNode(%s): %v", o.Address, err)
	}
	if err := n.StartNode(ctx, hd, spec); err != nil {
		t.Fatalf("StartNode(%s): %v", o.Address, err)
	}
	return hd, spec
}

// nodeLifecycle: create is idempotent for the same owner; a started node is Present; no other
// owner can stop or delete it (and it stays Present); its owner deletes it and it is Absent.
func nodeLifecycle(t T, h *Harness) {
	ctx := ctxFor(t)
	n := capOf[driver.Nodes](t, h.Driver, driver.CapNodeLifecycle)
	o := owner(h.Topology(t), "sysbox_node", "a")
	hd, spec := startedNode(t, h, o)
	if hd.ExternalID == "" || hd.Driver == "" {
		t.Fatalf("CreateNode: handle %+v names no object", hd)
	}
	again, err := n.CreateNode(ctx, spec)
	if err != nil || again.ExternalID != hd.ExternalID {
		t.Fatalf("CreateNode again for the same owner: got %q, %v; want the same object %q (a retried create adopts its own object)", again.ExternalID, err, hd.ExternalID)
	}
	obs, err := n.ObserveNode(ctx, hd, o)
	wantStatus(t, "ObserveNode after start", obs, err, substrate.Present)
	if obs.Owner != nil && !obs.Owner.Equal(o) {
		t.Errorf("ObserveNode: reports owner %+v, want %+v", *obs.Owner, o)
	}
	for what, other := range others(o) {
		obs, err := n.ObserveNode(ctx, hd, other)
		if obs.Status == substrate.Present || obs.Status == substrate.Absent {
			t.Errorf("ObserveNode as %s: got %s, %v; want neither present (markers differ) nor absent (it exists)", what, obs.Status, err)
		}
		wantNotOwned(t, "StopNode as "+what, n.StopNode(ctx, hd, other))
		wantNotOwned(t, "DeleteNode as "+what, n.DeleteNode(ctx, hd, other))
	}
	obs, err = n.ObserveNode(ctx, hd, o)
	wantStatus(t, "ObserveNode after refused stops and deletes", obs, err, substrate.Present)
	if err := n.DeleteNode(ctx, hd, o); err != nil {
		t.Fatalf("DeleteNode by its owner: %v", err)
	}
	obs, err = n.ObserveNode(ctx, hd, o)
	wantStatus(t, "ObserveNode after delete", obs, err, substrate.Absent)
	goneOK(t, "DeleteNode", n.DeleteNode(ctx, hd, o))
}

// nodeForeign: an object sysbox did not create that holds the name the driver would choose is
// neither adopted nor changed; create either refuses with ErrNotOwned or uses another object.
func nodeForeign(t T, h *Harness) {
	ctx := ctxFor(t)
	n := capOf[driver.Nodes](t, h.Driver, driver.CapNodeLifecycle)
	o := owner(h.Topology(t), "sysbox_node", "b")
	intact := h.Foreign(t, ForeignNode, o, substrate.Handle{})
	hd, err := n.CreateNode(ctx, h.NodeSpec(t, o))
	switch {
	case err == nil:
		if !intact() {
			t.Fatalf("CreateNode took over the foreign object holding its name (handle %s)", hd.ExternalID)
		}
		if err := n.DeleteNode(ctx, hd, o); err != nil {
			t.Fatalf("DeleteNode of the node created beside a foreign object: %v", err)
		}
	case !errors.Is(err, driver.ErrNotOwned):
		t.Errorf("CreateNode over a foreign object: got %v, want an error wrapping driver.ErrNotOwned (or a node elsewhere)", err)
	}
	if !intact() {
		t.Fatalf("the foreign object holding the node's name was changed or removed")
	}
}

// nodeUnreachable: with the backend cut off a node is Unknown, never Absent; stop and delete
// fail instead of reporting success or "already gone"; afterwards the node is still there.
func nodeUnreachable(t T, h *Harness) {
	ctx := ctxFor(t)
	n := capOf[driver.Nodes](t, h.Driver, driver.CapNodeLifecycle)
	o := owner(h.Topology(t), "sysbox_node", "c")
	hd, _ := startedNode(t, h, o)
	u, restore := h.unreachable(t, driver.CapNodeLifecycle)
	if u == nil {
		return
	}
	un := capOf[driver.Nodes](t, u, driver.CapNodeLifecycle)
	obs, err := un.ObserveNode(ctx, hd, o)
	wantUnknown(t, "ObserveNode", obs, err)
	wantRefusedUnreachable(t, "StopNode", un.StopNode(ctx, hd, o))
	wantRefusedUnreachable(t, "DeleteNode", un.DeleteNode(ctx, hd, o))
	restore()
	obs, err = n.ObserveNode(ctx, hd, o)
	wantStatus(t, "ObserveNode once the backend is back", obs, err, substrate.Present)
	if err := n.DeleteNode(ctx, hd, o); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
}
