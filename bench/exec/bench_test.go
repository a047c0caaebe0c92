// Package bench measures sysbox's plan → execute path at 10,000 resources with the in-memory
// fake driver standing in for netns: a topology of 100 networks and 9,900 nodes written as HCL
// (count), decoded and evaluated, planned by the real planner against the local state
// backend, then applied by the checkpointed executor; then the no-change plan of the same
// topology against the stored state; then destroy.
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/exec/
//
// Metrics (per run, seconds unless named otherwise):
//
//	apply-s          executor apply of 10,000 creates (checkpointed, CAS-saved)
//	noop-plan-s      read state + evaluate HCL + plan: the `sysbox plan` of an unchanged lab
//	noop-apply-s     the executor's part of an apply with nothing to do (locked read, checks)
//	destroy-s        executor destroy of everything + residue audit
//
// No timed assertions: compare runs, do not gate on them.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

const hcl = `
resource "sysbox_network" "lan" {
  count     = 100
  ipv4_cidr = "198.18.${count.index}.0/24"
}

resource "sysbox_node" "n" {
  count   = 9900
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan[count.index % 100]
    ipv4    = ["198.18.${count.index % 100}.${10 + floor(count.index / 100)}/24"]
  }
}
`

type env struct {
	dir  string
	ex   *executor.Executor
	mgr  *backend.Manager
	reg  *driver.Registry
	fake *fake.Driver
}

func newEnv(b *testing.B) *env {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(hcl), 0o644); err != nil {
		b.Fatal(err)
	}
	d, err := fake.New(fake.Options{}) // memory only: the driver is not what is measured
	if err != nil {
		b.Fatal(err)
	}
	reg := driver.NewRegistry()
	if err := reg.Register(d.As("netns")); err != nil {
		b.Fatal(err)
	}
	be, err := local.New(filepath.Join(dir, ".sysbox", "state"))
	if err != nil {
		b.Fatal(err)
	}
	mgr := backend.NewManager(be, backend.Options{})
	return &env{dir: dir, fake: d, mgr: mgr, reg: reg,
		ex: &executor.Executor{Resources: handlers.Builtin(), Registry: reg, State: mgr.Store(), Dir: filepath.Join(dir, ".sysbox"), Parallelism: executor.DefaultParallelism}}
}

// plan reads the state, evaluates the topology and plans it, as `sysbox plan` does.
func (e *env) plan(b *testing.B) *plans.Plan {
	st, err := e.mgr.Read(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	m, src, diags := config.Load(e.dir)
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	hs := handlers.Builtin()
	tp, diags := config.Evaluate(m, src, config.Options{Schemas: hs})
	if diags.HasErrors() {
		b.Fatal(diags)
	}
	p, err := (&plans.Planner{Handlers: hs, Capabilities: e.reg, ToolVersion: "bench"}).Plan(plans.Request{Topology: tp, Prior: plans.FromState(st)})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// apply executes p the way `sysbox apply` does (actions converted under the lock).
func (e *env) apply(b *testing.B, p *plans.Plan) *executor.Result {
	res, err := e.ex.Apply(context.Background(), &executor.Request{Fingerprint: p.Fingerprint.ActionsDigest,
		Prepare: func(ctx context.Context, st *states.State) ([]executor.Action, error) {
			return executor.FromPlan(p, st, handlers.Builtin())
		}})
	if err != nil {
		b.Fatal(err)
	}
	return res
}

func BenchmarkExec10k(b *testing.B) {
	for i := 0; i < b.N; i++ {
		e := newEnv(b)
		first := e.plan(b)
		if got := len(first.Actions); got != 10000 {
			b.Fatalf("plan: %d actions, want 10000", got)
		}
		t0 := time.Now()
		res := e.apply(b, first)
		apply := time.Since(t0)
		if res.Done != 10000 {
			b.Fatalf("apply: %d done", res.Done)
		}

		t1 := time.Now()
		again := e.plan(b)
		noopPlan := time.Since(t1)
		if again.HasChanges() {
			b.Fatalf("no-change plan has changes: %v", again.Counts())
		}
		t2 := time.Now()
		nres := e.apply(b, again)
		noopApply := time.Since(t2)
		if nres.Noop != 10000 {
			b.Fatalf("no-change apply: %d no-op", nres.Noop)
		}

		t3 := time.Now()
		dres, residue, err := e.ex.Destroy(context.Background(), nil)
		if err != nil || len(residue) != 0 {
			b.Fatalf("destroy: %v %v", err, residue)
		}
		destroy := time.Since(t3)
		if w := e.fake.World(); len(w.Nodes)+len(w.Networks) != 0 {
			b.Fatal("world not empty after destroy")
		}
		b.ReportMetric(apply.Seconds(), "apply-s")
		b.ReportMetric(noopPlan.Seconds(), "noop-plan-s")
		b.ReportMetric(noopApply.Seconds(), "noop-apply-s")
		b.ReportMetric(destroy.Seconds(), "destroy-s")
		b.ReportMetric(float64(res.Checkpoint.Records), "apply-ckpt-records")
		b.ReportMetric(float64(res.Checkpoint.Syncs), "apply-ckpt-fsyncs")
		b.ReportMetric(float64(res.StateSaves), "apply-state-saves")
		b.ReportMetric(float64(dres.StateSaves), "destroy-state-saves")
		fmt.Fprintf(os.Stderr, "apply %.2fs (%d records / %d fsyncs / %d state saves), no-change plan %.3fs, no-op apply %.3fs, destroy %.2fs\n",
			apply.Seconds(), res.Checkpoint.Records, res.Checkpoint.Syncs, res.StateSaves, noopPlan.Seconds(), noopApply.Seconds(), destroy.Seconds())
	}
}

// BenchmarkNoChangePlan10k measures only the no-change plan: a state of 10,000 applied
// resources is written directly (no driver), then each iteration reads it, evaluates the HCL
// and plans.
func BenchmarkNoChangePlan10k(b *testing.B) {
	e := newEnv(b)
	p := e.plan(b)
	st := states.New()
	st.Serial = 0
	now := time.Now().UTC()
	for _, a := range p.Actions {
		st.Set(&states.Resource{Addr: a.Address, SchemaVersion: a.SchemaVersion, Driver: a.Driver, ExternalID: "x-" + a.Address.String(),
			Attributes: a.After, Dependencies: a.DependsOn, CreatedAt: now, UpdatedAt: now,
			Owner:       substrate.Owner{Topology: st.Lineage, Address: a.Address.String(), Type: a.Type, Generation: 1},
			Observation: states.Observation{Status: substrate.Present, At: now}})
	}
	st.Serial = 1
	if err := e.ex.State.Save(context.Background(), st, 0); err == nil {
		b.Fatal("save without the lock succeeded") // the store refuses unlocked saves
	}
	unlock, err := e.ex.State.Lock(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	if err := e.ex.State.Save(context.Background(), st, 0); err != nil {
		b.Fatal(err)
	}
	unlock()
	b.ResetTimer()
	var read, eval, planning time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		st, err := e.mgr.Read(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		m, src, diags := config.Load(e.dir)
		hs := handlers.Builtin()
		tp, d2 := config.Evaluate(m, src, config.Options{Schemas: hs})
		if diags.HasErrors() || d2.HasErrors() {
			b.Fatal(diags, d2)
		}
		t2 := time.Now()
		q, err := (&plans.Planner{Handlers: hs, Capabilities: e.reg, ToolVersion: "bench"}).Plan(plans.Request{Topology: tp, Prior: plans.FromState(st)})
		if err != nil {
			b.Fatal(err)
		}
		if q.HasChanges() {
			b.Fatalf("changes: %v", q.Counts())
		}
		t3 := time.Now()
		read, eval, planning = read+t1.Sub(t0), eval+t2.Sub(t1), planning+t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(read.Seconds()/n, "read-state-s")
	b.ReportMetric(eval.Seconds()/n, "eval-hcl-s")
	b.ReportMetric(planning.Seconds()/n, "plan-s")
}
