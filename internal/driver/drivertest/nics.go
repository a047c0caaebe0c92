package drivertest

import (
	"slices"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var nicCases = []Case{
	{Name: "nics/lifecycle-and-ownership", Caps: []driver.Capability{driver.CapNodeLifecycle, driver.CapNIC}, Run: nicLifecycle},
}

// Addresses the cases give attachments (documentation ranges only).
const (
	testCIDR = "198.51.100.0/24"
	testIPv4 = "198.51.100.10/24"
	testMAC  = "02:00:c6:33:64:0a"
)

// attach wires a node of h's node driver to nh as "eth0" with the test addresses.
func attach(t T, h *Harness, node substrate.Handle, o substrate.Owner, nh substrate.Handle) (substrate.AttachmentSpec, substrate.AttachmentState) {
	t.Helper()
	nics := capOf[driver.NICs](t, h.nodeDriver(), driver.CapNIC)
	spec := substrate.AttachmentSpec{Owner: o, Node: o.Address, Name: "eth0", Network: nh, IPv4: []string{testIPv4}, MAC: testMAC}
	st, err := nics.Attach(ctxFor(t), node, spec)
	if err != nil {
		t.Fatalf("Attach(%s, eth0): %v", o.Address, err)
	}
	return spec, st
}

// wiredNode makes a started node for o attached to nh as "eth0", attaching before or after the
// start as the harness says.
func wiredNode(t T, h *Harness, o substrate.Owner, nh substrate.Handle) (substrate.Handle, substrate.NodeSpec, substrate.AttachmentSpec, substrate.AttachmentState) {
	t.Helper()
	if !h.AttachBeforeStart {
		hd, spec := startedNode(t, h, o)
		aspec, st := attach(t, h, hd, o, nh)
		return hd, spec, aspec, st
	}
	n := capOf[driver.Nodes](t, h.nodeDriver(), driver.CapNodeLifecycle)
	spec := h.NodeSpec(t, o)
	hd, err := n.CreateNode(ctxFor(t), spec)
	if err != nil {
		t.Fatalf("CreateNode(%s): %v", o.Address, err)
	}
	aspec, st := attach(t, h, hd, o, nh)
	if err := n.StartNode(ctxFor(t), hd, spec); err != nil {
		t.Fatalf("StartNode(%s): %v", o.Address, err)
	}
	return hd, spec, aspec, st
}

// sameAddresses fails unless st carries spec's MAC and addresses.
func sameAddresses(t T, what string, st substrate.AttachmentState, mac string, ipv4 []string) {
	t.Helper()
	if !strings.EqualFold(st.MAC, mac) || !slices.Equal(st.IPv4, ipv4) {
		t.Fatalf("%s: attachment has MAC %s, IPv4 %v; want %s, %v", what, st.MAC, st.IPv4, mac, ipv4)
	}
}

func nicLifecycle(t T, h *Harness) {
	ctx := ctxFor(t)
	nics := capOf[driver.NICs](t, h.Driver, driver.CapNIC)
	topo := h.Topology(t)
	o := owner(topo, "sysbox_node", "a")
	nh := network(t, h, topo, testCIDR)
	node, _, spec, st := wiredNode(t, h, o, nh)
	sameAddresses(t, "Attach", st, spec.MAC, spec.IPv4)
	if _, err := nics.Attach(ctx, node, spec); err != nil {
		t.Fatalf("Attach again for the same owner: %v (a retried attach must converge)", err)
	}
	obs, err := nics.ObserveAttachment(ctx, node, st, o)
	wantStatus(t, "ObserveAttachment", obs, err, substrate.Present)
	for what, other := range others(o) {
		wantNotOwned(t, "Detach as "+what, nics.Detach(ctx, node, st, other))
	}
	obs, err = nics.ObserveAttachment(ctx, node, st, o)
	wantStatus(t, "ObserveAttachment after refused detaches", obs, err, substrate.Present)
	if err := nics.Detach(ctx, node, st, o); err != nil {
		t.Fatalf("Detach by its owner: %v", err)
	}
	obs, err = nics.ObserveAttachment(ctx, node, st, o)
	wantStatus(t, "ObserveAttachment after detach", obs, err, substrate.Absent)
	n := capOf[driver.Nodes](t, h.Driver, driver.CapNodeLifecycle)
	if err := n.DeleteNode(ctx, node, o); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
}
