package plan

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/graph"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
)

type allCaps struct{}

func (allCaps) Require(string, string, ...driver.Capability) error { return nil }
func (allCaps) Descriptors() []driver.Descriptor {
	return []driver.Descriptor{{Name: "netns", Version: "bench", Capabilities: []driver.Capability{driver.CapNodeLifecycle}}}
}

// decodeGraphPlan is the measured unit: load + evaluate + graph + plan against empty state.
func decodeGraphPlan(tb testing.TB, dir string) int {
	m, src, diags := config.Load(dir)
	if diags.HasErrors() {
		tb.Fatal(diags)
	}
	reg := handlers.Builtin()
	top, diags := config.Evaluate(m, src, config.Options{Schemas: reg})
	if diags.HasErrors() {
		tb.Fatal(diags)
	}
	g := graph.New()
	for _, r := range top.Resources {
		g.Add(r.Addr)
		for _, d := range r.DependsOn {
			g.Connect(r.Addr, d)
		}
	}
	if _, err := g.TopoOrder(); err != nil {
		tb.Fatal(err)
	}
	p, err := (&plans.Planner{Handlers: reg, Capabilities: allCaps{}, ToolVersion: "bench"}).Plan(plans.Request{Topology: top, Prior: &plans.MemoryState{}})
	if err != nil {
		tb.Fatal(err)
	}
	return len(p.Actions)
}

func BenchmarkDecodeGraphPlan(b *testing.B) {
	type bcase struct {
		shape Shape
		n     int
	}
	var cases []bcase
	for _, shape := range []Shape{Chain, FanOut} {
		for _, n := range []int{1000, 10000, 50000} {
			cases = append(cases, bcase{shape, n})
		}
	}
	cases = append(cases, bcase{DepChain, 11000}) // issue 16's topology (bench/plan/cli.sh)
	for _, c := range cases {
		b.Run(fmt.Sprintf("%s/%d", c.shape, c.n), func(b *testing.B) {
			dir := b.TempDir()
			if err := Generate(dir, c.shape, c.n); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := 0; i < b.N; i++ {
				if got := decodeGraphPlan(b, dir); got != c.n {
					b.Fatalf("got %d actions, want %d", got, c.n)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(c.n), "µs/resource")
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
		})
	}
}

// TestGeneratedTopologiesPlan checks the generator's output plans completely (small sizes), so
// that the benchmark measures what it claims.
func TestGeneratedTopologiesPlan(t *testing.T) {
	for _, c := range []struct {
		shape Shape
		n     int
	}{{Chain, 1000}, {FanOut, 1000}, {DepChain, 1100}} {
		dir := t.TempDir()
		if err := Generate(dir, c.shape, c.n); err != nil {
			t.Fatal(err)
		}
		if got := decodeGraphPlan(t, dir); got != c.n {
			t.Errorf("%s: got %d actions, want %d", c.shape, got, c.n)
		}
	}
}

// cpuTime is the process's user+system CPU time (all threads, GC included): on a shared, busy
// machine it tells more than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
