package executor

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
)

// TestLabSmallThroughThePlanner drives examples/lab-small through the real decoder, handlers
// and planner, with the fake standing in for the netns and nftables drivers: apply, a
// no-change plan, a reset of one target, then a planned destroy ending with a clean audit.
func TestLabSmallThroughThePlanner(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "examples", "lab-small")
	m, src, diags := config.Load(dir)
	if diags.HasErrors() {
		t.Fatalf("load: %v", diags)
	}
	tp, diags := config.Evaluate(m, src, config.Options{Schemas: handlers.Builtin()})
	if diags.HasErrors() {
		t.Fatalf("evaluate: %v", diags)
	}
	work := t.TempDir()
	d, err := fake.New(fake.Options{Path: filepath.Join(work, "world.json")})
	if err != nil {
		t.Fatal(err)
	}
	reg := driver.NewRegistry()
	for _, name := range []string{"netns", "nftables"} {
		if err := reg.Register(d.As(name)); err != nil {
			t.Fatal(err)
		}
	}
	h := newHarnessWith(t, work, d)
	h.ex.Registry = reg
	planner := &plans.Planner{Handlers: handlers.Builtin(), Capabilities: reg, ToolVersion: "test"}
	ctx := context.Background()
	plan := func(destroy bool) (*plans.Plan, []Action) {
		t.Helper()
		st := h.state()
		p, err := planner.Plan(plans.Request{Topology: tp, Prior: plans.FromState(st), Destroy: destroy})
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		acts, err := FromPlan(p, st, handlers.Builtin())
		if err != nil {
			t.Fatalf("from plan: %v", err)
		}
		return p, acts
	}
	p, acts := plan(false)
	if !p.HasChanges() {
		t.Fatal("first plan has no changes")
	}
	res, err := h.ex.Apply(ctx, &Request{Fingerprint: p.Fingerprint.ActionsDigest, Actions: acts})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	st := h.state()
	if got, want := len(st.Resources), len(p.Actions); got != want || res.Done != want {
		t.Fatalf("applied %d (done %d), want %d: %v", got, res.Done, want, st.Addresses())
	}
	checkAgree(t, st, d)
	// The provisioner ran through guest exec, the secret reached only the provider call.
	if n := d.CountCalls("Exec"); n != 2 {
		t.Fatalf("provisioner exec calls: got %d, want 2 (one per web node)", n)
	}
	web0 := st.Resource(addrs.MustParseInstance("sysbox_node.web[0]"))
	if got := d.LastEnvironment(web0.ExternalID)["TOKEN"]; got != secretValue {
		t.Fatalf("TOKEN at provider: got %q", got)
	}
	// Stored attributes are the handler's stored form: planning again finds nothing to do.
	p2, _ := plan(false)
	if p2.HasChanges() {
		t.Fatalf("second plan has changes: %+v", p2.Counts())
	}

	// Reset web[0] with the desired specs of the current configuration.
	desired := acts
	if _, err := h.ex.Reset(ctx, ResetRequest{Targets: []addrs.Instance{web0.Addr}, Desired: desired}); err != nil {
		t.Fatalf("reset: %v", err)
	}
	after := h.state()
	checkAgree(t, after, d)
	if a := after.Resource(web0.Addr); a.ExternalID == web0.ExternalID || a.Attachments[0].MAC != web0.Attachments[0].MAC {
		t.Fatalf("reset: %s/%s → %s/%s", web0.ExternalID, web0.Attachments[0].MAC, a.ExternalID, a.Attachments[0].MAC)
	}
	if p3, _ := plan(false); p3.HasChanges() {
		t.Fatalf("plan after reset has changes: %+v", p3.Counts())
	}

	// Planned destroy: every resource goes, the audit is clean.
	pd, dacts := plan(true)
	if _, residue, err := h.ex.Destroy(ctx, &Request{Fingerprint: pd.Fingerprint.ActionsDigest, Actions: dacts}); err != nil || len(residue) != 0 {
		t.Fatalf("destroy: %v, residue %v", err, residue)
	}
	if st := h.state(); len(st.Resources) != 0 {
		t.Fatalf("after destroy: %v", st.Addresses())
	}
	if w := d.World(); len(w.Nodes)+len(w.Networks)+len(w.NICs)+len(w.Policies) != 0 {
		t.Fatalf("world after destroy: %+v", w)
	}
}

// TestFromPlanRejectsUnknownKinds keeps the executor from guessing behaviour from a type name.
func TestFromPlanRejectsUnknownKinds(t *testing.T) {
	p := &plans.Plan{Actions: []plans.ResourceAction{{Address: addrs.MustParseInstance("sysbox_vpn.x"), Action: plans.Create, Type: "sysbox_vpn"}}}
	if _, err := FromPlan(p, nil, handlers.Builtin()); err == nil {
		t.Fatal("unknown resource type accepted")
	}
}
