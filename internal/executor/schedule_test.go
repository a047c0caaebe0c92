package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"zyvor.dev/sysbox/internal/driver/fake"
)

// schedFixture records what a schedule call ran and skipped.
type schedFixture struct {
	mu      sync.Mutex
	ran     []int
	skipped map[int]string
	failed  map[int]bool
}

func newSchedFixture() *schedFixture {
	return &schedFixture{skipped: map[int]string{}, failed: map[int]bool{}}
}

func (f *schedFixture) isFailed(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed[i]
}

func (f *schedFixture) skip(i int, reason error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed[i] = true
	f.skipped[i] = reason.Error()
}

func (f *schedFixture) record(i int, fail bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ran = append(f.ran, i)
	if fail {
		f.failed[i] = true
	}
}

// scheduleWithin runs schedule and fails the test (instead of hanging it) when it does not
// return within a generous bound.
func scheduleWithin(t *testing.T, items []int, after map[int][]int, pool func(int) chan struct{}, f *schedFixture, fn func(int)) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := &run{}
		r.schedule(context.Background(), items, after, func(i int) string { return fmt.Sprintf("item%d", i) }, pool, f.isFailed, fn, f.skip)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("schedule did not return")
	}
}

// A destroy's shape: nodes 0-5 in one pool of one slot, networks 6 (nodes 0, 2, 4) and 7
// (nodes 1, 3, 5) and an artifact 8 (every node) in another. The nodes of network 6 go first,
// and network 6 starts while network 7's nodes are still being removed.
func TestScheduleFinishesTheSmallestGroupFirst(t *testing.T) {
	nodes, others := make(chan struct{}, 1), make(chan struct{}, 3)
	pool := func(i int) chan struct{} {
		if i < 6 {
			return nodes
		}
		return others
	}
	items := []int{0, 1, 2, 3, 4, 5, 6, 7, 8}
	after := map[int][]int{6: {0, 2, 4}, 7: {1, 3, 5}, 8: {0, 1, 2, 3, 4, 5}}
	f := newSchedFixture()
	net6 := make(chan struct{})
	scheduleWithin(t, items, after, pool, f, func(i int) {
		switch i {
		case 6:
			close(net6)
		case 3:
			// Network 6 waits only for nodes 0, 2 and 4: it must be under way before node 3 ends.
			select {
			case <-net6:
			case <-time.After(10 * time.Second):
				t.Error("network 6 had not started while node 3 (network 7's) was being removed")
			}
		}
		f.record(i, false)
	})
	var nodeOrder []int
	for _, i := range f.ran {
		if i < 6 {
			nodeOrder = append(nodeOrder, i)
		}
	}
	if diff := cmp.Diff([]int{0, 2, 4, 1, 3, 5}, nodeOrder); diff != "" {
		t.Errorf("node order (-want +got):\n%s", diff)
	}
	if len(f.ran) != len(items) || len(f.skipped) != 0 {
		t.Errorf("ran %v, skipped %v; want all %d run", f.ran, f.skipped, len(items))
	}
	if last := f.ran[len(f.ran)-1]; last != 8 && last != 7 {
		t.Errorf("ran %v: want the artifact or network 7 last", f.ran)
	}
}

// Items no one waits for keep their order, after the ones that let a waiter go.
func TestScheduleKeepsTheOrderOfItemsNobodyWaitsFor(t *testing.T) {
	one := make(chan struct{}, 1)
	items := []int{4, 3, 2, 1, 0}
	f := newSchedFixture()
	scheduleWithin(t, items, nil, func(int) chan struct{} { return one }, f, func(i int) { f.record(i, false) })
	if diff := cmp.Diff([]int{4, 3, 2, 1, 0}, f.ran); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}

// A prerequisite that is not part of the walk (it failed in the removal phase, so the
// creation phase does not run it) is not waited for: the item is skipped, not left hanging.
func TestScheduleSkipsWhenAPrerequisiteOutsideTheWalkFailed(t *testing.T) {
	pool := make(chan struct{}, 2)
	f := newSchedFixture()
	f.failed[7] = true // failed earlier, not among items
	scheduleWithin(t, []int{0, 1}, map[int][]int{0: {7}}, func(int) chan struct{} { return pool }, f, func(i int) { f.record(i, false) })
	if diff := cmp.Diff([]int{1}, f.ran); diff != "" {
		t.Errorf("ran (-want +got):\n%s", diff)
	}
	if got, want := f.skipped[0], "dependency item7 failed"; got != want {
		t.Errorf("skip reason of 0: got %q, want %q", got, want)
	}
}

// A failure skips what waits for it, and what waits for that, without running them.
func TestScheduleSkipsDependentsOfAFailure(t *testing.T) {
	pool := make(chan struct{}, 4)
	f := newSchedFixture()
	after := map[int][]int{1: {0}, 2: {1}, 3: {0, 4}}
	scheduleWithin(t, []int{0, 1, 2, 3, 4}, after, func(int) chan struct{} { return pool }, f, func(i int) { f.record(i, i == 0) })
	want := map[int]string{1: "dependency item0 failed", 2: "dependency item1 failed", 3: "dependency item0 failed"}
	if diff := cmp.Diff(want, f.skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
	if len(f.ran) != 2 {
		t.Errorf("ran %v, want only 0 and 4", f.ran)
	}
}

// Once the run cannot finish (a fatal error), items not started yet are skipped.
func TestScheduleSkipsItemsNotStartedAfterAFatalError(t *testing.T) {
	pool := make(chan struct{}, 1)
	f := newSchedFixture()
	r := &run{}
	fatal := errors.New("checkpoint failed")
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.schedule(context.Background(), []int{0, 1, 2}, nil, func(i int) string { return fmt.Sprint(i) },
			func(int) chan struct{} { return pool }, f.isFailed, func(i int) {
				f.record(i, false)
				r.setFatal(fatal)
			}, f.skip)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("schedule did not return")
	}
	if len(f.ran) != 1 {
		t.Fatalf("ran %v, want one item (the one whose run set the fatal error)", f.ran)
	}
	for _, i := range []int{0, 1, 2} {
		if i == f.ran[0] {
			continue
		}
		if got, want := f.skipped[i], "not started: checkpoint failed"; got != want {
			t.Errorf("skip reason of %d: got %q, want %q", i, got, want)
		}
	}
}

// A replaced network whose removal is skipped (the node on it failed to go first) is not
// created again in that run; a new node on that network is skipped too. The creation phase
// used to wait for the network, which it never runs, and hung.
func TestApplySkipsACreationWaitingForASkippedReplace(t *testing.T) {
	h := newHarness(t)
	h.mustApply(topology(1, 1, false))
	h.fake.SetFailpoint("Detach", 0, fake.FailError)
	var (
		res *Result
		err error
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = h.apply(topology(1, 2, false), "sysbox_network.lan[0]", "sysbox_node.web[0]")
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("apply did not return")
	}
	if err == nil {
		t.Fatal("apply with a failing removal: got no error")
	}
	var skipped bool
	for _, e := range res.Failed {
		if strings.Contains(e.Error(), "sysbox_node.web[1]: create skipped: dependency sysbox_network.lan[0] failed") {
			skipped = true
		}
	}
	if !skipped {
		t.Errorf("failures %v: want web[1]'s create skipped for lan[0]", res.Failed)
	}
}
