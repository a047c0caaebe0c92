package graph

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
)

func a(s string) addrs.Instance { return addrs.MustParseInstance(s) }

// build makes a graph from "from->to" edges and lone nodes.
func build(t *testing.T, spec ...string) *Graph {
	t.Helper()
	g := New()
	for _, s := range spec {
		from, to, ok := strings.Cut(s, "->")
		if !ok {
			g.Add(a(s))
			continue
		}
		g.Connect(a(from), a(to))
	}
	return g
}

func names(as []addrs.Instance) string {
	var out []string
	for _, x := range as {
		out = append(out, x.String())
	}
	return strings.Join(out, " ")
}

func TestTopoOrder(t *testing.T) {
	tests := []struct {
		name        string
		edges       []string
		wantCreate  string
		wantDestroy string
	}{
		{"single", []string{"x.a"}, "x.a", "x.a"},
		{"chain", []string{"x.c->x.b", "x.b->x.a"}, "x.a x.b x.c", "x.c x.b x.a"},
		{"fan-in", []string{"x.n1->x.net", "x.n2->x.net", "x.fw->x.n1"}, "x.net x.n1 x.fw x.n2", "x.fw x.n1 x.n2 x.net"},
		{"modules", []string{`module.m["b"].x.a->x.root`, `module.m["a"].x.a->x.root`}, `x.root module.m["a"].x.a module.m["b"].x.a`, `module.m["a"].x.a module.m["b"].x.a x.root`},
		{"independent sorted", []string{"x.b", "x.a", "x.c[1]", "x.c[0]"}, "x.a x.b x.c[0] x.c[1]", "x.a x.b x.c[0] x.c[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := build(t, tt.edges...)
			got, err := g.TopoOrder()
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != tt.wantCreate {
				t.Errorf("create order: got %q, want %q", names(got), tt.wantCreate)
			}
			got, err = g.DestroyOrder()
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != tt.wantDestroy {
				t.Errorf("destroy order: got %q, want %q", names(got), tt.wantDestroy)
			}
		})
	}
}

func TestCycleNamesAddresses(t *testing.T) {
	tests := []struct {
		name  string
		edges []string
		want  string
	}{
		{"self", []string{"x.a->x.a"}, "x.a → x.a"},
		{"two", []string{"x.a->x.b", "x.b->x.a"}, "x.a → x.b → x.a"},
		{"three behind a tail", []string{"x.z->x.a", "x.a->x.b", "x.b->x.c", "x.c->x.a", "x.ok"}, "x.a → x.b → x.c → x.a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := build(t, tt.edges...).Validate()
			var ce *CycleError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want *CycleError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestWalkRespectsDependenciesAndParallelism(t *testing.T) {
	g := New()
	// 3 layers of 8: every node in layer i depends on every node in layer i-1.
	for l := 1; l < 3; l++ {
		for i := 0; i < 8; i++ {
			for j := 0; j < 8; j++ {
				g.Connect(a(fmt.Sprintf("x.l%d[%d]", l, i)), a(fmt.Sprintf("x.l%d[%d]", l-1, j)))
			}
		}
	}
	var (
		mu      sync.Mutex
		doneAt  = map[string]int{}
		seq     int
		running int32
		maxRun  int32
	)
	err := g.Walk(context.Background(), 3, func(ctx context.Context, n addrs.Instance) error {
		r := atomic.AddInt32(&running, 1)
		for {
			m := atomic.LoadInt32(&maxRun)
			if r <= m || atomic.CompareAndSwapInt32(&maxRun, m, r) {
				break
			}
		}
		mu.Lock()
		for _, d := range g.DependenciesOf(n) {
			if _, ok := doneAt[d.String()]; !ok {
				t.Errorf("%s started before its dependency %s finished", n, d)
			}
		}
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		seq++
		doneAt[n.String()] = seq
		mu.Unlock()
		atomic.AddInt32(&running, -1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(doneAt) != 24 {
		t.Errorf("visited %d nodes, want 24", len(doneAt))
	}
	if maxRun > 3 {
		t.Errorf("max concurrent calls: got %d, want <= 3", maxRun)
	}
	if maxRun < 2 {
		t.Errorf("max concurrent calls: got %d, want the walk to run independent nodes in parallel", maxRun)
	}
}

func TestWalkSkipsDependentsOfFailure(t *testing.T) {
	g := build(t, "x.b->x.a", "x.c->x.b", "x.d->x.other", "x.other")
	var visited sync.Map
	boom := errors.New("boom")
	err := g.Walk(context.Background(), 2, func(ctx context.Context, n addrs.Instance) error {
		visited.Store(n.String(), true)
		if n.String() == "x.a" {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("got %v, want it to wrap boom", err)
	}
	for _, s := range []string{"x.b", "x.c"} {
		if _, ok := visited.Load(s); ok {
			t.Errorf("%s was called although x.a failed", s)
		}
		if !strings.Contains(err.Error(), s+": skipped: dependency x.a failed") {
			t.Errorf("error %q does not report %s as skipped", err, s)
		}
	}
	for _, s := range []string{"x.other", "x.d"} {
		if _, ok := visited.Load(s); !ok {
			t.Errorf("%s (independent of x.a) was not called", s)
		}
	}
}

func TestWalkStopsOnCancel(t *testing.T) {
	g := build(t, "x.b->x.a", "x.c->x.b")
	ctx, cancel := context.WithCancel(context.Background())
	var calls int32
	err := g.Walk(ctx, 1, func(ctx context.Context, n addrs.Instance) error {
		atomic.AddInt32(&calls, 1)
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if calls != 1 {
		t.Errorf("calls after cancel: got %d, want 1", calls)
	}
}

func TestSubgraphAndDOT(t *testing.T) {
	g := build(t, "x.fw->x.n", "x.n->x.net", "x.other->x.net", "x.lone")
	sub := g.Subgraph([]addrs.Instance{a("x.fw")})
	if got, want := names(sub.Nodes()), "x.fw x.n x.net"; got != want {
		t.Errorf("subgraph: got %q, want %q", got, want)
	}
	dot := sub.DOT()
	for _, want := range []string{`"x.fw" -> "x.n";`, `"x.n" -> "x.net";`} {
		if !strings.Contains(dot, want) {
			t.Errorf("DOT lacks %s:\n%s", want, dot)
		}
	}
	if strings.Contains(dot, "x.other") {
		t.Errorf("DOT has a node outside the subgraph:\n%s", dot)
	}
}

func BenchmarkTopoOrderChain(b *testing.B) {
	g := New()
	for i := 1; i < 50000; i++ {
		g.Connect(a(fmt.Sprintf("x.n%d", i)), a(fmt.Sprintf("x.n%d", i-1)))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := g.TopoOrder(); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDOTQuotesKeys(t *testing.T) {
	g := New()
	g.Connect(a(`x.n["é\"q"]`), a(`x.net`))
	want := `"x.n[\"é\\\"q\"]" -> "x.net";`
	if dot := g.DOT(); !strings.Contains(dot, want) {
		t.Errorf("DOT:\n%s\nwant a line %s", dot, want)
	}
}

// TestConnectAllEqualsConnect: ConnectAll and ConnectShared build the graph a Connect per edge
// builds.
func TestConnectAllEqualsConnect(t *testing.T) {
	tests := []struct {
		name string
		from string
		to   []string
	}{
		{"none", "x.a", nil},
		{"new nodes", "x.a", []string{"x.b", "x.c[0]", "x.c[1]"}},
		{"existing and repeated", "x.c[0]", []string{"x.b", "x.b", "x.d"}},
	}
	one, all, sh := New(), New(), New()
	for _, tt := range tests {
		for _, to := range tt.to {
			one.Connect(a(tt.from), a(to))
		}
		if len(tt.to) == 0 {
			one.Add(a(tt.from))
		}
		var tos []addrs.Instance
		for _, to := range tt.to {
			tos = append(tos, a(to))
		}
		all.ConnectAll(a(tt.from), tos)
		sh.ConnectShared(a(tt.from), tos)
		sh.ConnectShared(a(tt.from), tos[:0]) // the same array, another length: not the same list
		t.Run(tt.name, func(t *testing.T) {
			if got, want := names(all.Nodes()), names(one.Nodes()); got != want {
				t.Errorf("nodes: got %q, want %q", got, want)
			}
			for _, n := range one.Nodes() {
				if got, want := names(all.DependenciesOf(n)), names(one.DependenciesOf(n)); got != want {
					t.Errorf("%s depends on: got %q, want %q", n, got, want)
				}
				if got, want := names(all.DependentsOf(n)), names(one.DependentsOf(n)); got != want {
					t.Errorf("%s dependents: got %q, want %q", n, got, want)
				}
				if got, want := names(sh.DependenciesOf(n)), names(one.DependenciesOf(n)); got != want {
					t.Errorf("shared: %s depends on: got %q, want %q", n, got, want)
				}
				if got, want := names(sh.DependentsOf(n)), names(one.DependentsOf(n)); got != want {
					t.Errorf("shared: %s dependents: got %q, want %q", n, got, want)
				}
			}
		})
	}
}

// TestConnectSharedList: nodes given the same list all get its edges, also when another list
// comes between them, and in a graph made by NewSized.
func TestConnectSharedList(t *testing.T) {
	deps := []addrs.Instance{a("x.net[0]"), a("x.net[1]")}
	other := []addrs.Instance{a("x.net[1]"), a("x.m")}
	for name, g := range map[string]*Graph{"New": New(), "NewSized": NewSized(2)} {
		g.ConnectShared(a("x.n[0]"), deps)
		g.ConnectShared(a("x.n[1]"), deps)
		g.ConnectShared(a("x.o"), other)
		g.ConnectShared(a("x.p"), other[:1]) // the same array, another length: not the same list
		g.ConnectShared(a("x.n[2]"), deps)
		for _, n := range []string{"x.n[0]", "x.n[1]", "x.n[2]"} {
			if got, want := names(g.DependenciesOf(a(n))), "x.net[0] x.net[1]"; got != want {
				t.Errorf("%s: %s depends on: got %q, want %q", name, n, got, want)
			}
		}
		if got, want := names(g.DependenciesOf(a("x.o"))), "x.m x.net[1]"; got != want {
			t.Errorf("%s: x.o depends on: got %q, want %q", name, got, want)
		}
		if got, want := names(g.DependenciesOf(a("x.p"))), "x.net[1]"; got != want {
			t.Errorf("%s: x.p depends on: got %q, want %q", name, got, want)
		}
		if got, want := names(g.DependentsOf(a("x.net[1]"))), "x.n[0] x.n[1] x.n[2] x.o x.p"; got != want {
			t.Errorf("%s: x.net[1] dependents: got %q, want %q", name, got, want)
		}
	}
}
