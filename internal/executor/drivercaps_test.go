package executor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/pkg/substrate"
)

// forceDeleting is the fake driver saying that its DeleteNode ends a running node itself.
type forceDeleting struct{ *fake.Driver }

func (forceDeleting) DeleteStopsNode() bool { return true }

var _ driver.ForceDeleter = forceDeleting{}

// useDriver registers d in place of h's fake driver (the same world).
func (h *harness) useDriver(d driver.Driver) {
	h.t.Helper()
	reg := driver.NewRegistry()
	if err := reg.Register(d); err != nil {
		h.t.Fatal(err)
	}
	h.ex.Registry = reg
}

// removeGenerations applies desired (with the driver use makes of h's fake, when use is not
// nil), replaces web[1], resets web[0] and destroys everything: every way a node generation is
// removed. label names the case in failures.
func removeGenerations(t *testing.T, label string, use func(*fake.Driver) driver.Driver, desired []Action) *harness {
	t.Helper()
	h := newHarness(t)
	if use != nil {
		h.useDriver(use(h.fake))
	}
	h.mustApply(desired)
	h.mustApply(desired, "sysbox_node.web[1]")
	if _, err := h.ex.Reset(context.Background(), ResetRequest{Targets: []addrs.Instance{mustAddr("sysbox_node.web[0]")}, Desired: desired}); err != nil {
		t.Fatalf("%s: reset: %v", label, err)
	}
	checkAgree(t, h.state(), h.fake)
	if _, residue, err := h.ex.Destroy(context.Background(), nil); err != nil || len(residue) != 0 {
		t.Fatalf("%s: destroy: %v, residue %v", label, err, residue)
	}
	return h
}

// TestNodeRemovalStopsUnlessDeleteDoes: a node is stopped before it is deleted (replace,
// reset's prior generation, destroy) unless its driver says DeleteNode ends it itself; then
// DeleteNode alone removes it, after its ownership check, and nothing is left behind.
func TestNodeRemovalStopsUnlessDeleteDoes(t *testing.T) {
	for _, force := range []bool{false, true} {
		var use func(*fake.Driver) driver.Driver
		if force {
			use = func(f *fake.Driver) driver.Driver { return forceDeleting{f} }
		}
		h := removeGenerations(t, fmt.Sprintf("force=%v", force), use, topology(1, 3, true))
		// Removed: the replaced generation, the reset's prior generation, the 3 destroyed.
		stops, deletes := h.fake.CountCalls("StopNode"), h.fake.CountCalls("DeleteNode")
		wantStops := 5
		if force {
			wantStops = 0
		}
		if stops != wantStops || deletes != 5 {
			t.Errorf("force=%v: got %d StopNode and %d DeleteNode calls, want %d and 5", force, stops, deletes, wantStops)
		}
		if w := h.fake.World(); len(w.Nodes) != 0 {
			t.Errorf("force=%v: nodes left after destroy: %v", force, w.Nodes)
		}
	}
}

// nicRemoving is the fake driver saying that its DeleteNode removes the node's NICs itself
// (the fake's does: like a network namespace, its devices go with it).
type nicRemoving struct{ *fake.Driver }

func (nicRemoving) DeleteRemovesNICs() bool { return true }

var _ driver.NICRemover = nicRemoving{}

// TestNodeRemovalDetachesUnlessDeleteDoes: a node's attachments are detached one by one
// before it is deleted (replace, reset's prior generation, destroy) unless its driver says
// DeleteNode removes them; then there is no Detach call and no NIC is left behind.
func TestNodeRemovalDetachesUnlessDeleteDoes(t *testing.T) {
	for _, removes := range []bool{false, true} {
		var use func(*fake.Driver) driver.Driver
		if removes {
			use = func(f *fake.Driver) driver.Driver { return nicRemoving{f} }
		}
		h := removeGenerations(t, fmt.Sprintf("removes=%v", removes), use, topology(2, 4, false))
		// Removed: the replaced generation, the reset's prior generation, the 4 destroyed,
		// one attachment each.
		detaches, deletes := h.fake.CountCalls("Detach"), h.fake.CountCalls("DeleteNode")
		wantDetaches := 6
		if removes {
			wantDetaches = 0
		}
		if detaches != wantDetaches || deletes != 6 {
			t.Errorf("removes=%v: got %d Detach and %d DeleteNode calls, want %d and 6", removes, detaches, deletes, wantDetaches)
		}
		if w := h.fake.World(); len(w.Nodes) != 0 || len(w.NICs) != 0 || len(w.Networks) != 0 {
			t.Errorf("removes=%v: left after destroy: %d nodes, %d NICs, %d networks", removes, len(w.Nodes), len(w.NICs), len(w.Networks))
		}
	}
}

// inFlight is the fake driver saying it tolerates max operations in flight; its CreateNode
// counts the creates in progress and holds each until want are (or a short while passed).
type inFlight struct {
	*fake.Driver
	max, want int

	mu       sync.Mutex
	cur, top int
}

func (d *inFlight) MaxInFlight() int { return d.max }

var _ driver.Concurrency = (*inFlight)(nil)

func (d *inFlight) CreateNode(ctx context.Context, spec substrate.NodeSpec) (substrate.Handle, error) {
	d.mu.Lock()
	d.cur++
	d.top = max(d.top, d.cur)
	d.mu.Unlock()
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		d.mu.Lock()
		reached := d.cur >= d.want
		d.mu.Unlock()
		if reached {
			break
		}
	}
	defer func() {
		d.mu.Lock()
		d.cur--
		d.mu.Unlock()
	}()
	return d.Driver.CreateNode(ctx, spec)
}

// TestDriverConcurrencyBoundsItsOperations: a driver saying how many operations it tolerates
// runs that many at once (more than the executor's parallelism), never more; a parallelism the
// user fixed bounds it all the same.
func TestDriverConcurrencyBoundsItsOperations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fixed bool
		want  int
	}{
		{"driver's bound", false, 7},
		{"fixed parallelism", true, 4},
	} {
		h := newHarness(t) // Parallelism 4
		h.ex.FixedParallelism = tc.fixed
		d := &inFlight{Driver: h.fake, max: 7, want: 7}
		h.useDriver(d)
		h.mustApply(topology(2, 16, false))
		checkAgree(t, h.state(), h.fake)
		if d.top != tc.want {
			t.Errorf("%s: got at most %d creates in flight, want %d", tc.name, d.top, tc.want)
		}
	}
}
