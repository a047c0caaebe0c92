package executor

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// labBox is a resource type the executor has never heard of: a network, under its own name
// and its own stored form. Everything sysbox knows about it is in this handler.
type labBox struct{}

type labBoxConfig struct {
	Driver string `json:"driver"`
	Subnet string `json:"subnet"`
}

var _ handlers.Handler = (*labBox)(nil)

func (*labBox) Type() string        { return "lab_box" }
func (*labBox) Modes() (bool, bool) { return true, false }
func (*labBox) SchemaVersion() int  { return 1 }
func (*labBox) Kind() specs.Kind    { return specs.KindNetwork }
func (*labBox) Spec() hcldec.Spec {
	return hcldec.ObjectSpec{"subnet": &hcldec.AttrSpec{Name: "subnet", Type: cty.String, Required: true}}
}

func (*labBox) Decode(req *config.DecodeRequest) (*config.Decoded, hcl.Diagnostics) {
	c := labBoxConfig{Driver: "fake", Subnet: req.Value.GetAttr("subnet").AsString()}
	return &config.Decoded{Config: c, Ref: cty.ObjectVal(map[string]cty.Value{"address": cty.StringVal(req.Addr.String())})}, nil
}

func (*labBox) Desired(ri *config.ResourceInstance, _ plans.Facts) (json.RawMessage, error) {
	return json.Marshal(ri.Config)
}

func (*labBox) Diff(prior, desired json.RawMessage) (plans.Diff, error) {
	if string(prior) == string(desired) {
		return plans.Diff{Action: plans.NoOp, Reason: "up to date"}, nil
	}
	return plans.Diff{Action: plans.Replace, Reason: "changed"}, nil
}

func (*labBox) DependencyChanged(*config.ResourceInstance, addrs.Instance, plans.Action) (plans.Action, string) {
	return plans.NoOp, ""
}

func (*labBox) Requirements(attrs json.RawMessage, action plans.Action) (plans.Requirement, error) {
	var c labBoxConfig
	if err := json.Unmarshal(attrs, &c); err != nil {
		return plans.Requirement{}, err
	}
	return plans.Requirement{Driver: c.Driver, Capabilities: []driver.Capability{driver.CapManagedNetwork}}, nil
}

func (*labBox) DriverSpec(attrs json.RawMessage, _ specs.Refs) (specs.Desired, error) {
	var c labBoxConfig
	if err := json.Unmarshal(attrs, &c); err != nil {
		return specs.Desired{}, err
	}
	return specs.Desired{Network: &substrate.NetworkSpec{IPv4CIDR: c.Subnet, MTU: 1500}}, nil
}

// TestNewResourceTypeTouchesOnlyItsHandler takes a resource type registered only in a handler
// registry instance through plan, apply, refresh and a destroy from state alone (no
// configuration: the kind comes from the registry, not from the type's name).
func TestNewResourceTypeTouchesOnlyItsHandler(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.sysbox.hcl"), []byte(`
resource "lab_box" "a" {
  subnet = "198.18.0.0/24"
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := handlers.Builtin()
	if err := reg.Register(&labBox{}); err != nil {
		t.Fatal(err)
	}
	m, sources, diags := config.Load(src)
	if diags.HasErrors() {
		t.Fatalf("load: %v", diags)
	}
	tp, diags := config.Evaluate(m, sources, config.Options{Schemas: reg})
	if diags.HasErrors() {
		t.Fatalf("evaluate: %v", diags)
	}
	h := newHarness(t)
	h.ex.Resources = reg
	planner := &plans.Planner{Handlers: reg, Capabilities: h.ex.Registry, ToolVersion: "test"}
	ctx := context.Background()
	st := h.state()
	p, err := planner.Plan(plans.Request{Topology: tp, Prior: plans.FromState(st)})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	acts, err := FromPlan(p, st, reg)
	if err != nil {
		t.Fatalf("from plan: %v", err)
	}
	if len(acts) != 1 || acts[0].Kind != specs.KindNetwork || acts[0].Network == nil || acts[0].Network.IPv4CIDR != "198.18.0.0/24" {
		t.Fatalf("actions: got %+v, want one network create of 198.18.0.0/24", acts)
	}
	if _, err := h.ex.Apply(ctx, &Request{Fingerprint: p.Fingerprint.ActionsDigest, Actions: acts}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	box := h.state().Resource(addrs.MustParseInstance("lab_box.a"))
	if box == nil {
		t.Fatal("lab_box.a not in state after apply")
	}
	w := h.fake.World().Networks[box.ExternalID]
	if w == nil || w.CIDR != "198.18.0.0/24" || w.Marker != box.Owner.Marker() {
		t.Fatalf("world network %s: got %+v", box.ExternalID, w)
	}
	statuses, err := h.ex.Refresh(ctx, acts)
	if err != nil || statuses["lab_box.a"] != substrate.Present {
		t.Fatalf("refresh: %v, %v; want lab_box.a present", statuses, err)
	}
	if _, residue, err := h.ex.Destroy(ctx, nil); err != nil || len(residue) != 0 {
		t.Fatalf("destroy from state: %v, residue %v", err, residue)
	}
	if st := h.state(); len(st.Resources) != 0 || len(h.fake.World().Networks) != 0 {
		t.Fatalf("after destroy: state %v, world %+v", st.Addresses(), h.fake.World().Networks)
	}
	// Without the handler, the executor does not guess: the type's resources are refused.
	if _, err := FromPlan(p, nil, handlers.Builtin()); err == nil {
		t.Fatal("lab_box planned without its handler: accepted")
	}
}
