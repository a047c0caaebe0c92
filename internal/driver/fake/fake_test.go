package fake

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func owner(addr, typ string, gen uint64) substrate.Owner {
	return substrate.Owner{Topology: "topo-1", Address: addr, Type: typ, Generation: gen}
}

func TestRegisterDeclaresEveryCapability(t *testing.T) {
	r := driver.NewRegistry()
	if _, err := Register(r, ""); err != nil {
		t.Fatal(err)
	}
	all := []driver.Capability{driver.CapArtifact, driver.CapManagedNetwork, driver.CapNodeLifecycle, driver.CapNIC,
		driver.CapNodeState, driver.CapGuestExec, driver.CapPolicy, driver.CapReset, driver.CapImport, driver.CapAudit}
	if err := r.Require("sysbox_node.x", Name, all...); err != nil {
		t.Fatalf("got %v, want every capability", err)
	}
}

// world builds a network and a running, attached node.
func world(t *testing.T, d *Driver) (net, node substrate.Handle, att substrate.AttachmentState) {
	t.Helper()
	ctx := context.Background()
	net, err := d.CreateNetwork(ctx, substrate.NetworkSpec{Owner: owner("sysbox_network.lan", "sysbox_network", 1), IPv4CIDR: "198.51.100.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	no := owner("sysbox_node.web", "sysbox_node", 1)
	spec := substrate.NodeSpec{Owner: no, Driver: Name, Command: []string{"sleep"}, Environment: map[string]string{"TOKEN": "s3cret"}}
	node, err = d.CreateNode(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	att, err = d.Attach(ctx, node, substrate.AttachmentSpec{Owner: no, Node: no.Address, Name: "lan", Network: net, MAC: "02:00:00:00:00:01", IPv4: []string{"198.51.100.10/24"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, node, spec); err != nil {
		t.Fatal(err)
	}
	return net, node, att
}

func TestOwnershipCheckedOnEveryDestructiveCall(t *testing.T) {
	ctx := context.Background()
	d, _ := New(Options{})
	net, node, att := world(t, d)
	wrongGen := owner("sysbox_node.web", "sysbox_node", 2)
	otherTopo := owner("sysbox_node.web", "sysbox_node", 1)
	otherTopo.Topology = "topo-2"
	incomplete := substrate.Owner{Address: "sysbox_node.web"}
	for name, call := range map[string]func(substrate.Owner) error{
		"DeleteNode":    func(o substrate.Owner) error { return d.DeleteNode(ctx, node, o) },
		"StopNode":      func(o substrate.Owner) error { return d.StopNode(ctx, node, o) },
		"Detach":        func(o substrate.Owner) error { return d.Detach(ctx, node, att, o) },
		"DeleteNetwork": func(o substrate.Owner) error { return d.DeleteNetwork(ctx, net, o) },
	} {
		for label, o := range map[string]substrate.Owner{"wrong generation": wrongGen, "other topology": otherTopo, "incomplete": incomplete} {
			if err := call(o); !errors.Is(err, driver.ErrNotOwned) {
				t.Errorf("%s with %s owner: got %v, want ErrNotOwned", name, label, err)
			}
		}
	}
	if got := len(d.World().Nodes); got != 1 {
		t.Fatalf("nodes after refused deletes: got %d, want 1", got)
	}
	if err := d.DeleteNetwork(ctx, net, owner("sysbox_network.lan", "sysbox_network", 1)); err == nil {
		t.Fatal("network deleted while a nic is attached")
	}
	if err := d.DeleteNode(ctx, node, owner("sysbox_node.web", "sysbox_node", 1)); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, node, owner("sysbox_node.web", "sysbox_node", 1)); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("second delete: got %v, want ErrNotFound", err)
	}
	if got := len(d.World().NICs); got != 0 {
		t.Fatalf("nics after node delete: got %d, want 0", got)
	}
}

func TestCreateIsIdempotentOnOwner(t *testing.T) {
	ctx := context.Background()
	d, _ := New(Options{})
	spec := substrate.NodeSpec{Owner: owner("sysbox_node.a", "sysbox_node", 1)}
	h1, err := d.CreateNode(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := d.CreateNode(ctx, spec)
	if err != nil || h2.ExternalID != h1.ExternalID {
		t.Fatalf("second create: got %v %v, want the same object %s", h2.ExternalID, err, h1.ExternalID)
	}
	if got := len(d.World().Nodes); got != 1 {
		t.Fatalf("nodes: got %d, want 1", got)
	}
}

func TestPersistedWorldSurvivesReopen(t *testing.T) {
	p := filepath.Join(t.TempDir(), "world.json")
	d, err := New(Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	_, node, _ := world(t, d)
	d2, err := New(Options{Path: p})
	if err != nil {
		t.Fatal(err)
	}
	w := d2.World()
	if n := w.Nodes[node.ExternalID]; n == nil || !n.Running || len(w.NICs) != 1 || len(w.Networks) != 1 {
		t.Fatalf("reopened world: got %+v", w)
	}
	if len(w.Nodes[node.ExternalID].EnvKeys) != 1 {
		t.Fatalf("env keys: got %v, want [TOKEN]", w.Nodes[node.ExternalID].EnvKeys)
	}
	if got := d.LastEnvironment(node.ExternalID)["TOKEN"]; got != "s3cret" {
		t.Fatalf("environment reached the driver: got %q", got)
	}
	if got := d2.LastEnvironment(node.ExternalID); got != nil {
		t.Fatalf("secret plaintext survived in the world file: got %v", got)
	}
}

func TestFailpoints(t *testing.T) {
	ctx := context.Background()
	d, err := New(Options{Failpoints: "CreateNode@2=error,ObserveNode=unavailable"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateNode(ctx, substrate.NodeSpec{Owner: owner("sysbox_node.a", "sysbox_node", 1)}); err != nil {
		t.Fatalf("first hit: got %v, want success", err)
	}
	if _, err := d.CreateNode(ctx, substrate.NodeSpec{Owner: owner("sysbox_node.b", "sysbox_node", 1)}); !errors.Is(err, ErrInjected) {
		t.Fatalf("second hit: got %v, want ErrInjected", err)
	}
	if got := len(d.World().Nodes); got != 1 {
		t.Fatalf("failed create mutated the world: %d nodes", got)
	}
	obs, err := d.ObserveNode(ctx, substrate.Handle{ExternalID: "x"}, owner("sysbox_node.a", "sysbox_node", 1))
	if !errors.Is(err, driver.ErrUnavailable) || obs.Status != substrate.Unknown {
		t.Fatalf("unavailable observe: got %v %v, want Unknown + ErrUnavailable", obs.Status, err)
	}
	for _, bad := range []string{"CreateNode", "CreateNode=explode", "CreateNode@0=error", "CreateNod=crash", "mutations@1=crash", "Exec.afterr=error"} {
		if _, err := ParseFailpoints(bad); err == nil {
			t.Errorf("ParseFailpoints(%q): got nil error", bad)
		}
	}
	for _, good := range []string{"CreateNode.after@2=crash,Attach=error", "mutation@3=crash", "Exec@1=crash", "StopNode=unavailable"} {
		if _, err := ParseFailpoints(good); err != nil {
			t.Errorf("ParseFailpoints(%q): %v", good, err)
		}
	}
}

func TestObservations(t *testing.T) {
	ctx := context.Background()
	d, _ := New(Options{})
	_, node, att := world(t, d)
	no := owner("sysbox_node.web", "sysbox_node", 1)
	tests := []struct {
		name  string
		setup func()
		want  substrate.Status
	}{
		{"running", func() {}, substrate.Present},
		{"stopped", func() { d.StopNode(ctx, node, no) }, substrate.Drifted},
		{"foreign marker", func() { d.SetMarker(node.ExternalID, owner("sysbox_node.other", "sysbox_node", 1).Marker()) }, substrate.Drifted},
		{"removed", func() { d.Remove(node.ExternalID) }, substrate.Absent},
	}
	for _, tt := range tests {
		tt.setup()
		obs, err := d.ObserveNode(ctx, node, no)
		if err != nil || obs.Status != tt.want {
			t.Errorf("%s: got %v %v, want %v", tt.name, obs.Status, err, tt.want)
		}
	}
	if obs, _ := d.ObserveAttachment(ctx, node, att, no); obs.Status != substrate.Absent {
		t.Errorf("nic of removed node: got %v, want absent", obs.Status)
	}
}

func TestPolicyDigestDrift(t *testing.T) {
	ctx := context.Background()
	d, _ := New(Options{})
	_, node, att := world(t, d)
	spec := substrate.PolicySpec{Owner: owner("sysbox_firewall.fw", "sysbox_firewall", 1),
		Firewall: &substrate.Firewall{DefaultInput: "drop", DefaultForward: "accept", DefaultOutput: "accept",
			Rules: []substrate.Rule{{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 80, Attachment: "lan"}}}}
	h, err := d.ApplyPolicy(ctx, node, []substrate.AttachmentState{att}, spec)
	if err != nil {
		t.Fatal(err)
	}
	if obs, _ := d.ObservePolicy(ctx, node, h, nil, spec); obs.Status != substrate.Present {
		t.Fatalf("fresh policy: got %v, want present", obs.Status)
	}
	d.SetPolicyDigest(h.ExternalID, "sha256:edited")
	if obs, _ := d.ObservePolicy(ctx, node, h, nil, spec); obs.Status != substrate.Drifted {
		t.Fatalf("edited policy: got %v, want drifted", obs.Status)
	}
	bad := spec
	bad.Firewall = &substrate.Firewall{Rules: []substrate.Rule{{Chain: "input", Action: "accept", Protocol: "any", Attachment: "wan"}}}
	if _, err := d.ApplyPolicy(ctx, node, []substrate.AttachmentState{att}, bad); err == nil {
		t.Fatal("policy naming an unwired attachment accepted")
	}
	if err := d.DeletePolicy(ctx, node, h, owner("sysbox_firewall.other", "sysbox_firewall", 1)); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("delete with wrong owner: got %v", err)
	}
}

func TestNewGenerationQuiescesPrior(t *testing.T) {
	ctx := context.Background()
	d, _ := New(Options{})
	net, node, _ := world(t, d)
	g1 := owner("sysbox_node.web", "sysbox_node", 1)
	g2 := owner("sysbox_node.web", "sysbox_node", 2)
	if _, err := d.NewGeneration(ctx, node, g2, substrate.NodeSpec{Owner: g2}); !errors.Is(err, driver.ErrNotOwned) && err == nil {
		t.Fatal("new generation accepted with wrong prior owner")
	}
	h2, err := d.NewGeneration(ctx, node, g1, substrate.NodeSpec{Owner: g2})
	if err != nil {
		t.Fatal(err)
	}
	if h2.ExternalID == node.ExternalID {
		t.Fatal("external id did not change")
	}
	// The replacement can take the same MAC because the prior NIC is down.
	if _, err := d.Attach(ctx, h2, substrate.AttachmentSpec{Owner: g2, Name: "lan", Network: net, MAC: "02:00:00:00:00:01"}); err != nil {
		t.Fatalf("attach replacement with same mac: %v", err)
	}
	w := d.World()
	if !w.Nodes[node.ExternalID].Quiesced || len(w.Nodes) != 2 {
		t.Fatalf("prior not kept quiesced: %+v", w.Nodes)
	}
}

func TestImportRuleAndResidue(t *testing.T) {
	ctx := context.Background()
	d, _ := New(Options{})
	world(t, d)
	if err := d.AddForeignNode("legacy-1"); err != nil {
		t.Fatal(err)
	}
	o := owner("sysbox_node.legacy", "sysbox_node", 1)
	imp, err := d.ImportNode(ctx, "legacy-1", o)
	if err != nil || imp.Handle.ExternalID != "legacy-1" {
		t.Fatalf("import foreign: got %+v %v", imp, err)
	}
	if err := d.CheckPrivate(imp.Handle.Private); err != nil {
		t.Fatalf("imported envelope: %v", err)
	}
	// A node marked for another resource is refused.
	if _, err := d.ImportNode(ctx, "legacy-1", owner("sysbox_node.other", "sysbox_node", 1)); !errors.Is(err, driver.ErrNotOwned) {
		t.Fatalf("import of another resource's node: got %v, want ErrNotOwned", err)
	}
	res, err := d.Residue(ctx, "topo-1")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range res {
		kinds[r.Kind]++
	}
	if kinds[KindNode] != 2 || kinds[KindNetwork] != 1 || kinds[KindNIC] != 1 {
		t.Fatalf("residue: got %v", kinds)
	}
	if res, _ := d.Residue(ctx, "topo-other"); len(res) != 0 {
		t.Fatalf("residue of another topology: got %v, want none", res)
	}
	if err := d.CheckPrivate(substrate.Envelope{Driver: Name, Version: 9}); err == nil {
		t.Fatal("unknown envelope version accepted")
	}
}

func TestArtifactDigest(t *testing.T) {
	ctx := context.Background()
	d, _ := New(Options{})
	d.SetArtifact("./busybox.tar", "v1")
	id, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: "oci_image", Source: "./busybox.tar"})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.VerifyArtifact(ctx, id); err != nil {
		t.Fatalf("verify unchanged: %v", err)
	}
	d.SetArtifact("./busybox.tar", "v2")
	if err := d.VerifyArtifact(ctx, id); !errors.Is(err, driver.ErrDigestMismatch) {
		t.Fatalf("verify changed: got %v, want ErrDigestMismatch", err)
	}
	if _, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Source: "./busybox.tar", Digest: id.Digest}); !errors.Is(err, driver.ErrDigestMismatch) {
		t.Fatalf("stale pin: got %v, want ErrDigestMismatch", err)
	}
}
