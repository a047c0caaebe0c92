package graph

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"zyvor.dev/sysbox/internal/addrs"
)

// Graph is a DAG (once Validate passes) of resource instances.
type Graph struct {
	nodes []addrs.Instance
	index map[string]int
	deps  [][]int // node → nodes it depends on
	rdeps [][]int // node → nodes that depend on it

	// ConnectShared: the node ids of the last list it was given (the nodes that share a list,
	// the instances of one resource, come one after another)
	last    sharedList
	lastIDs []int
}

// New returns an empty graph.
func New() *Graph { return NewSized(0) }

// NewSized returns an empty graph with room for n nodes (their index, adjacency lists).
func NewSized(n int) *Graph {
	return &Graph{index: make(map[string]int, n), nodes: make([]addrs.Instance, 0, n),
		deps: make([][]int, 0, n), rdeps: make([][]int, 0, n)}
}

// Add adds a node (idempotent) and returns its id.
func (g *Graph) Add(a addrs.Instance) int {
	k := a.UniqueKey()
	if id, ok := g.index[k]; ok {
		return id
	}
	id := len(g.nodes)
	g.nodes = append(g.nodes, a)
	g.index[k] = id
	g.deps = append(g.deps, nil)
	g.rdeps = append(g.rdeps, nil)
	return id
}

// Connect records that from depends on to; both are added if missing. Duplicate edges are
// harmless but callers should avoid them.
func (g *Graph) Connect(from, to addrs.Instance) {
	f, t := g.Add(from), g.Add(to)
	g.deps[f] = append(g.deps[f], t)
	g.rdeps[t] = append(g.rdeps[t], f)
}

// ConnectAll records that from depends on each of to (Connect for each, from looked up once).
func (g *Graph) ConnectAll(from addrs.Instance, to []addrs.Instance) {
	f := g.Add(from)
	for _, a := range to {
		t := g.Add(a)
		g.deps[f] = append(g.deps[f], t)
		g.rdeps[t] = append(g.rdeps[t], f)
	}
}

// ConnectShared is ConnectAll for dependency lists shared between nodes (config gives the
// instances of one resource one list): the nodes of a list given again right after (recognised
// by its backing array and length) are not looked up again. A list passed here must not be
// modified while g is being built. (Only the last list is remembered: a map of every list was
// an entry per node where no list is shared, as in a chain of single-instance resources.)
func (g *Graph) ConnectShared(from addrs.Instance, to []addrs.Instance) {
	f := g.Add(from)
	if len(to) == 0 {
		return
	}
	k := sharedList{&to[0], len(to)}
	ids := g.lastIDs
	if k != g.last { // never the zero last before the first list: to is not empty
		ids = make([]int, len(to))
		for i, a := range to {
			ids[i] = g.Add(a)
		}
		g.last, g.lastIDs = k, ids
	}
	if len(g.deps[f]) == 0 {
		g.deps[f] = ids[:len(ids):len(ids)] // shared by every node of this list; an append copies
	} else {
		g.deps[f] = append(g.deps[f], ids...)
	}
	for _, t := range ids {
		r := g.rdeps[t]
		if len(r) == cap(r) && len(r) >= 256 {
			r = slices.Grow(r, len(r)) // double (append grows large slices by 1.25×): a shared list's nodes gain many dependents
		}
		g.rdeps[t] = append(r, f)
	}
}

// sharedList identifies a dependency list by its backing array and length.
type sharedList struct {
	first *addrs.Instance
	n     int
}

// Len is the number of nodes.
func (g *Graph) Len() int { return len(g.nodes) }

// Has reports whether a is a node.
func (g *Graph) Has(a addrs.Instance) bool { _, ok := g.index[a.UniqueKey()]; return ok }

// Nodes returns the nodes sorted by address.
func (g *Graph) Nodes() []addrs.Instance {
	out := append([]addrs.Instance(nil), g.nodes...)
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// DependenciesOf returns what a depends on, sorted.
func (g *Graph) DependenciesOf(a addrs.Instance) []addrs.Instance {
	return g.list(g.deps, a)
}

// DependentsOf returns what depends on a, sorted.
func (g *Graph) DependentsOf(a addrs.Instance) []addrs.Instance {
	return g.list(g.rdeps, a)
}

func (g *Graph) list(adj [][]int, a addrs.Instance) []addrs.Instance {
	id, ok := g.index[a.UniqueKey()]
	if !ok {
		return nil
	}
	out := make([]addrs.Instance, 0, len(adj[id]))
	for _, d := range adj[id] {
		out = append(out, g.nodes[d])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// Reverse returns the graph with every edge turned around: the destroy graph.
func (g *Graph) Reverse() *Graph {
	r := &Graph{nodes: g.nodes, index: g.index, deps: g.rdeps, rdeps: g.deps}
	return r
}

// CycleError reports a dependency cycle by its addresses, first repeated at the end.
type CycleError struct {
	Cycle []addrs.Instance
}

func (e *CycleError) Error() string {
	parts := make([]string, len(e.Cycle))
	for i, a := range e.Cycle {
		parts[i] = a.String()
	}
	return "dependency cycle: " + strings.Join(parts, " → ")
}

// idHeap orders ready node ids by address for deterministic orders.
type idHeap struct {
	ids []int
	g   *Graph
}

func (h *idHeap) Len() int           { return len(h.ids) }
func (h *idHeap) Less(i, j int) bool { return h.g.nodes[h.ids[i]].Less(h.g.nodes[h.ids[j]]) }
func (h *idHeap) Swap(i, j int)      { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *idHeap) Push(x any)         { h.ids = append(h.ids, x.(int)) }
func (h *idHeap) Pop() any {
	x := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return x
}

// TopoOrder returns the nodes so that every node comes after everything it depends on (create
// order). A cycle is a *CycleError.
func (g *Graph) TopoOrder() ([]addrs.Instance, error) {
	n := len(g.nodes)
	indeg := make([]int, n)
	for i := range g.deps {
		indeg[i] = len(g.deps[i])
	}
	h := &idHeap{g: g}
	for i := 0; i < n; i++ {
		if indeg[i] == 0 {
			h.ids = append(h.ids, i)
		}
	}
	heap.Init(h)
	out := make([]addrs.Instance, 0, n)
	for h.Len() > 0 {
		id := heap.Pop(h).(int)
		out = append(out, g.nodes[id])
		for _, r := range g.rdeps[id] {
			indeg[r]--
			if indeg[r] == 0 {
				heap.Push(h, r)
			}
		}
	}
	if len(out) != n {
		return nil, g.findCycle(indeg)
	}
	return out, nil
}

// DestroyOrder returns the reverse dependency order: dependents before what they depend on.
func (g *Graph) DestroyOrder() ([]addrs.Instance, error) { return g.Reverse().TopoOrder() }

// Validate returns a *CycleError if the graph has a cycle.
func (g *Graph) Validate() error {
	_, err := g.TopoOrder()
	return err
}

// findCycle finds one cycle among the nodes Kahn's algorithm could not order (indeg > 0).
func (g *Graph) findCycle(indeg []int) error {
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(g.nodes))
	// iterate in address order for a deterministic report
	var stuck []int
	for i, d := range indeg {
		if d > 0 {
			stuck = append(stuck, i)
		}
	}
	sort.Slice(stuck, func(i, j int) bool { return g.nodes[stuck[i]].Less(g.nodes[stuck[j]]) })
	for _, start := range stuck {
		if color[start] != white {
			continue
		}
		// iterative DFS
		type frame struct{ id, next int }
		stack := []frame{{start, 0}}
		color[start] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next < len(g.deps[top.id]) {
				d := g.deps[top.id][top.next]
				top.next++
				switch color[d] {
				case white:
					color[d] = grey
					stack = append(stack, frame{d, 0})
				case grey:
					var cyc []addrs.Instance
					i := len(stack) - 1
					for stack[i].id != d {
						i--
					}
					for ; i < len(stack); i++ {
						cyc = append(cyc, g.nodes[stack[i].id])
					}
					cyc = append(cyc, g.nodes[d])
					return &CycleError{Cycle: cyc}
				}
				continue
			}
			color[top.id] = black
			stack = stack[:len(stack)-1]
		}
	}
	return errors.New("dependency cycle (not located)")
}

// Subgraph returns the nodes in keep plus everything they depend on, transitively, with the
// edges among them (for -target).
func (g *Graph) Subgraph(keep []addrs.Instance) *Graph {
	out := New()
	seen := make([]bool, len(g.nodes))
	var queue []int
	for _, a := range keep {
		if id, ok := g.index[a.UniqueKey()]; ok && !seen[id] {
			seen[id] = true
			queue = append(queue, id)
		}
	}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		out.Add(g.nodes[id])
		for _, d := range g.deps[id] {
			out.Connect(g.nodes[id], g.nodes[d])
			if !seen[d] {
				seen[d] = true
				queue = append(queue, d)
			}
		}
	}
	return out
}

// SkippedError reports nodes not visited because something they depend on failed.
type SkippedError struct {
	Node   addrs.Instance
	Failed addrs.Instance
}

func (e *SkippedError) Error() string {
	return fmt.Sprintf("%s: skipped: dependency %s failed", e.Node, e.Failed)
}

// Walk calls fn for every node once all its dependencies succeeded, running at most
// parallelism calls at a time (parallelism < 1 means 1). A node whose dependency failed or was
// skipped is not called. Cancelling ctx stops new calls. The error joins every failure
// (wrapped with the node's address), every skip, and ctx's error if it was cancelled.
// The graph must be acyclic (Validate).
func (g *Graph) Walk(ctx context.Context, parallelism int, fn func(ctx context.Context, node addrs.Instance) error) error {
	if err := g.Validate(); err != nil {
		return err
	}
	if parallelism < 1 {
		parallelism = 1
	}
	w := newWalk(g)
	n := len(g.nodes)
	var wg sync.WaitGroup
	w.mu.Lock()
	for w.done < n {
		for w.ready.Len() > 0 && w.running < parallelism && ctx.Err() == nil {
			w.running++
			wg.Add(1)
			go w.call(ctx, &wg, heap.Pop(w.ready).(int), fn)
		}
		if ctx.Err() != nil && w.running == 0 {
			break
		}
		if w.running == 0 && w.ready.Len() == 0 {
			break // cannot happen on a DAG; defensive
		}
		w.mu.Unlock()
		<-w.wake
		w.mu.Lock()
	}
	w.mu.Unlock()
	wg.Wait()
	if err := ctx.Err(); err != nil && w.done < n {
		w.errs = append(w.errs, fmt.Errorf("walk stopped after %d of %d nodes: %w", w.done, n, err))
	}
	return errors.Join(w.errs...)
}

// walk is one Walk's bookkeeping; mu guards every field but g and wake.
type walk struct {
	g        *Graph
	mu       sync.Mutex
	errs     []error
	ready    *idHeap // nodes whose dependencies all finished
	indeg    []int   // dependencies not yet finished, per node
	failedBy []int   // -1: fine; else id of the failed root cause
	running  int
	done     int
	wake     chan struct{} // one send per finished call
}

func newWalk(g *Graph) *walk {
	n := len(g.nodes)
	w := &walk{g: g, ready: &idHeap{g: g}, indeg: make([]int, n), failedBy: make([]int, n), wake: make(chan struct{}, n+1)}
	for i := range g.deps {
		w.indeg[i] = len(g.deps[i])
	}
	for i := range w.failedBy {
		w.failedBy[i] = -1
	}
	for i := 0; i < n; i++ {
		if w.indeg[i] == 0 {
			w.ready.ids = append(w.ready.ids, i)
		}
	}
	heap.Init(w.ready)
	return w
}

// call runs fn on node id, records its result and wakes the scheduler.
func (w *walk) call(ctx context.Context, wg *sync.WaitGroup, id int, fn func(ctx context.Context, node addrs.Instance) error) {
	defer wg.Done()
	err := fn(ctx, w.g.nodes[id])
	w.mu.Lock()
	w.running--
	cause := -1
	if err != nil {
		w.errs = append(w.errs, fmt.Errorf("%s: %w", w.g.nodes[id], err))
		cause = id
	}
	w.finish(id, cause)
	w.mu.Unlock()
	w.wake <- struct{}{}
}

// finish records a node's result (cause: the failed root cause, or -1), readying or skipping
// the dependents it was the last dependency of; called with mu held.
func (w *walk) finish(id int, cause int) {
	w.done++
	for _, r := range w.g.rdeps[id] {
		if cause >= 0 && w.failedBy[r] < 0 {
			w.failedBy[r] = cause
		}
		w.indeg[r]--
		if w.indeg[r] == 0 {
			if w.failedBy[r] >= 0 {
				w.errs = append(w.errs, &SkippedError{Node: w.g.nodes[r], Failed: w.g.nodes[w.failedBy[r]]})
				w.finish(r, w.failedBy[r])
			} else {
				heap.Push(w.ready, r)
			}
		}
	}
}

// DOT renders the graph in Graphviz form, nodes and edges sorted.
func (g *Graph) DOT() string {
	var b strings.Builder
	b.WriteString("digraph sysbox {\n  rankdir = \"RL\";\n  node [shape = rect];\n")
	for _, a := range g.Nodes() {
		fmt.Fprintf(&b, "  %s;\n", dotQuote(a.String()))
	}
	for _, a := range g.Nodes() {
		for _, d := range g.DependenciesOf(a) {
			fmt.Fprintf(&b, "  %s -> %s;\n", dotQuote(a.String()), dotQuote(d.String()))
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// dotQuote quotes s as a DOT string: only backslash and double quote are escaped (DOT has no
// \u escapes, so other characters stay as they are).
func dotQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
