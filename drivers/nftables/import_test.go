package nftables

import (
	"context"
	"testing"

	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestKernelImportClaimsUnmarkedTable (kernel tier): an unmarked table made by hand inside a
// node is claimed by ImportPolicy under its own name — replaced by the declared policy with
// this resource's marker, observed present — and deleted by its new owner.
func TestKernelImportClaimsUnmarkedTable(t *testing.T) {
	nd, pd, bb := policyRig(t)
	ctx := context.Background()
	topo := drivertest.RandomTopology()
	t.Cleanup(func() { _ = nd.Scrub(ctx, topo) })
	no := substrate.Owner{Topology: topo, Address: "sysbox_node.n", Type: "sysbox_node", Generation: 1}
	spec := substrate.NodeSpec{Owner: no, Driver: netns.Name, Command: []string{bb, "sleep", "3600"}}
	node, err := nd.CreateNode(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.StartNode(ctx, node, spec); err != nil {
		t.Fatal(err)
	}
	const name = "handmade"
	unmarked := foreignTable(t, nd, node, name)
	pol := substrate.PolicySpec{Owner: substrate.Owner{Topology: topo, Address: "sysbox_firewall.n", Type: "sysbox_firewall", Generation: 1},
		Firewall: &substrate.Firewall{DefaultInput: "drop", DefaultForward: "drop", DefaultOutput: "accept"}}
	h, err := pd.ImportPolicy(ctx, node, name, nil, pol)
	if err != nil {
		t.Fatalf("ImportPolicy(unmarked %s): %v", name, err)
	}
	if h.ExternalID != name {
		t.Errorf("ImportPolicy: handle names %q, want the table's own name %q", h.ExternalID, name)
	}
	if unmarked() {
		t.Errorf("table %s is still unmarked after the import claimed it", name)
	}
	obs, err := pd.ObservePolicy(ctx, node, h, nil, pol)
	if err != nil || obs.Status != substrate.Present {
		t.Fatalf("ObservePolicy(claimed): got %s (%s), %v; want present", obs.Status, obs.Reason, err)
	}
	other := pol
	other.Owner.Address = "sysbox_firewall.m"
	if _, err := pd.ImportPolicy(ctx, node, name, nil, other); err == nil {
		t.Errorf("ImportPolicy of the claimed table by another resource: got nil, want refused")
	}
	if err := pd.DeletePolicy(ctx, node, h, pol.Owner); err != nil {
		t.Fatalf("DeletePolicy(claimed): %v", err)
	}
	if obs, err := pd.ObservePolicy(ctx, node, h, nil, pol); err != nil || obs.Status != substrate.Absent {
		t.Errorf("ObservePolicy after delete: got %s, %v; want absent", obs.Status, err)
	}
}
