package plans_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/pkg/substrate"
)

func allCaps() drivertest.Caps {
	return drivertest.Caps{
		"docker":   {driver.CapArtifact, driver.CapNodeLifecycle, driver.CapNodeState, driver.CapNIC},
		"netns":    {driver.CapArtifact, driver.CapManagedNetwork, driver.CapNodeLifecycle, driver.CapNIC, driver.CapNodeState, driver.CapGuestExec, driver.CapReset},
		"nftables": {driver.CapPolicy},
	}
}

// topo writes files into a temp dir and evaluates them.
func topo(t *testing.T, files map[string]string, inputs map[string]config.InputValue) *config.Topology {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return load(t, dir, inputs)
}

func load(t *testing.T, dir string, inputs map[string]config.InputValue) *config.Topology {
	t.Helper()
	m, src, diags := config.Load(dir)
	if diags.HasErrors() {
		t.Fatalf("load: %v", diags)
	}
	tp, diags := config.Evaluate(m, src, config.Options{Schemas: handlers.Builtin(), Inputs: inputs})
	if diags.HasErrors() {
		t.Fatalf("evaluate: %v", diags)
	}
	return tp
}

func planner() *plans.Planner {
	return &plans.Planner{Handlers: handlers.Builtin(), Capabilities: allCaps(), ToolVersion: "test"}
}

// facts gives every artifact instance a digest derived from its source (or the given map).
func facts(tp *config.Topology, override map[string]string) plans.Facts {
	f := plans.Facts{Artifacts: map[string]substrate.ArtifactIdentity{}}
	for _, r := range tp.Resources {
		if r.Addr.Resource.Type != "sysbox_artifact" {
			continue
		}
		c := r.Config.(handlers.ArtifactConfig)
		d := fmt.Sprintf("sha256:%064x", len(c.Source))
		if o, ok := override[r.Addr.String()]; ok {
			d = o
		}
		f.Artifacts[r.Addr.String()] = substrate.ArtifactIdentity{Kind: c.Kind, Source: c.Source, Digest: d, Size: 42}
	}
	return f
}

// applied turns a plan into the prior state apply would leave behind.
func applied(p *plans.Plan, serial uint64) *plans.MemoryState {
	st := &plans.MemoryState{LineageID: "lineage-1", SerialNo: serial}
	for _, a := range p.Actions {
		if a.Action == plans.Delete || a.Mode == "data" {
			continue
		}
		st.Items = append(st.Items, plans.PriorResource{Addr: a.Address, SchemaVersion: a.SchemaVersion, Attributes: a.After,
			Dependencies: a.DependsOn, Status: substrate.Present})
	}
	return st
}

// summary renders "action address" lines.
func summary(p *plans.Plan) string {
	var b strings.Builder
	for _, a := range p.Actions {
		fmt.Fprintf(&b, "%s %s\n", a.Action, a.Address)
	}
	return b.String()
}

func find(p *plans.Plan, addr string) plans.ResourceAction {
	for _, a := range p.Actions {
		if a.Address.String() == addr {
			return a
		}
	}
	return plans.ResourceAction{}
}

func withStatus(st *plans.MemoryState, addr string, s substrate.Status) *plans.MemoryState {
	out := &plans.MemoryState{LineageID: st.LineageID, SerialNo: st.SerialNo}
	for _, r := range st.Items {
		if r.Addr.Equal(addrs.MustParseInstance(addr)) {
			r.Status, r.StatusReason = s, "test says "+string(s)
		}
		out.Items = append(out.Items, r)
	}
	return out
}
