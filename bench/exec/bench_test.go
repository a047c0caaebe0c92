// Package bench measures the executor at scale with the in-memory fake driver: apply of a
// topology of 10,000 resources, the no-change plan of that topology (planning from state and
// converting to executor actions, plus the no-op apply), and its destroy.
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/exec/
//
// The figures are printed per resource with -v (b.ReportMetric). There are no timed
// assertions: compare runs, do not gate on them.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/exec"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
)

const (
	networks = 100
	nodes    = 9900 // + networks = 10,000 resources
)

// desired builds the planner's view: one ResourceAction per resource with handler stored
// forms, so FromPlan and the executor see exactly what a real plan carries.
func desired() []plans.ResourceAction {
	var out []plans.ResourceAction
	for i := 0; i < networks; i++ {
		a := addrs.MustParseInstance(fmt.Sprintf("sysbox_network.lan[%d]", i))
		attrs := mustJSON(handlers.NetworkConfig{Driver: "netns", IPv4CIDR: fmt.Sprintf("198.18.%d.0/24", i), MTU: 1500})
		out = append(out, plans.ResourceAction{Address: a, Action: plans.Create, Type: "sysbox_network", Mode: "managed", SchemaVersion: 1, After: attrs, Driver: "netns"})
	}
	for i := 0; i < nodes; i++ {
		a := addrs.MustParseInstance(fmt.Sprintf("sysbox_node.n[%d]", i))
		net := fmt.Sprintf("sysbox_network.lan[%d]", i%networks)
		c := handlers.NodeConfig{Driver: "netns", Command: []string{"sleep", "infinity"},
			Attachments: map[string]handlers.Attachment{"lan": {Network: net, MAC: fmt.Sprintf("02:00:00:%02x:%02x:%02x", i>>16&255, i>>8&255, i&255),
				IPv4: []string{fmt.Sprintf("198.18.%d.%d/24", i%networks, 10+i/networks)}}}}
		out = append(out, plans.ResourceAction{Address: a, Action: plans.Create, Type: "sysbox_node", Mode: "managed", SchemaVersion: 1,
			After: mustJSON(c), Driver: "netns", DependsOn: []addrs.Instance{addrs.MustParseInstance(net)}})
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := jsonMarshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type env struct {
	ex    *exec.Executor
	mgr   *backend.Manager
	fake  *fake.Driver
	state string
}

func newEnv(b *testing.B) *env {
	dir := b.TempDir()
	d, err := fake.New(fake.Options{}) // memory only: the driver is not what is measured
	if err != nil {
		b.Fatal(err)
	}
	reg := driver.NewRegistry()
	if err := reg.Register(d.As("netns")); err != nil {
		b.Fatal(err)
	}
	be, err := local.New(filepath.Join(dir, "state.sbxstate"))
	if err != nil {
		b.Fatal(err)
	}
	mgr := backend.NewManager(be, backend.Options{})
	return &env{fake: d, mgr: mgr, state: dir,
		ex: &exec.Executor{Registry: reg, State: mgr.Store(), Dir: filepath.Join(dir, ".sysbox"), Parallelism: exec.DefaultParallelism}}
}

// noChangePlan plans the desired topology against the stored state the way apply does:
// every resource compared through its handler, then converted to executor actions.
func noChangePlan(b *testing.B, e *env, want []plans.ResourceAction) (int, time.Duration) {
	start := time.Now()
	st, err := e.mgr.Read(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	hs := handlers.Builtin()
	prior := map[string]*states.Resource{}
	for _, r := range st.Resources {
		prior[r.Addr.String()] = r
	}
	var acts []plans.ResourceAction
	changes := 0
	for _, ra := range want {
		p := prior[ra.Address.String()]
		if p == nil {
			changes++
			acts = append(acts, ra)
			continue
		}
		h, _ := hs.Handler(ra.Address.Resource.Mode, ra.Type)
		d, err := h.Diff(p.Attributes, ra.After)
		if err != nil {
			b.Fatal(err)
		}
		a := ra
		a.Action = d.Action
		if d.Action != plans.NoOp {
			changes++
		}
		acts = append(acts, a)
	}
	xacts, err := exec.FromPlan(&plans.Plan{Actions: acts}, st)
	if err != nil {
		b.Fatal(err)
	}
	res, err := e.ex.Apply(context.Background(), &exec.Plan{Actions: xacts})
	if err != nil {
		b.Fatal(err)
	}
	if res.Noop != len(want) {
		b.Fatalf("no-change apply: %d no-op of %d", res.Noop, len(want))
	}
	return changes, time.Since(start)
}

func BenchmarkExec10k(b *testing.B) {
	want := desired()
	for i := 0; i < b.N; i++ {
		e := newEnv(b)
		ctx := context.Background()
		acts, err := exec.FromPlan(&plans.Plan{Actions: want}, nil)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		res, err := e.ex.Apply(ctx, &exec.Plan{Fingerprint: "bench", Actions: acts})
		if err != nil {
			b.Fatal(err)
		}
		apply := time.Since(t0)
		if res.Done != len(want) {
			b.Fatalf("apply: %d done of %d", res.Done, len(want))
		}
		changes, noop := noChangePlan(b, e, want)
		if changes != 0 {
			b.Fatalf("no-change plan found %d changes", changes)
		}
		t1 := time.Now()
		dres, residue, err := e.ex.Destroy(ctx, nil)
		if err != nil || len(residue) != 0 {
			b.Fatalf("destroy: %v %v", err, residue)
		}
		destroy := time.Since(t1)
		b.ReportMetric(apply.Seconds(), "apply-s")
		b.ReportMetric(noop.Seconds(), "noop-plan-s")
		b.ReportMetric(destroy.Seconds(), "destroy-s")
		b.ReportMetric(float64(res.Checkpoint.Records), "apply-ckpt-records")
		b.ReportMetric(float64(res.Checkpoint.Syncs), "apply-ckpt-fsyncs")
		b.ReportMetric(float64(res.StateSaves), "apply-state-saves")
		b.ReportMetric(float64(dres.StateSaves), "destroy-state-saves")
		if w := e.fake.World(); len(w.Nodes) != 0 {
			b.Fatalf("world not empty after destroy")
		}
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
