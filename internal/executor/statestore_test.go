package executor

import (
	"context"
	"sync"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/states"
)

// slowStore is a StateStore whose saves take at least d (and are counted).
type slowStore struct {
	d     time.Duration
	mu    sync.Mutex
	saves int
}

func (s *slowStore) Lock(context.Context, string) (func() error, error) {
	return func() error { return nil }, nil
}
func (s *slowStore) Read(context.Context) (*states.State, error) { return nil, nil }
func (s *slowStore) Snapshot(context.Context, string) error      { return nil }
func (s *slowStore) Save(ctx context.Context, st *states.State, expect uint64) error {
	time.Sleep(s.d)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves++
	return nil
}

// gate is a saver wait that records the pauses asked for and returns only when the pause is
// cut (commit, hurry) or the test releases it.
type gate struct {
	mu      sync.Mutex
	pauses  []time.Duration
	release chan struct{}
}

func (g *gate) wait(d time.Duration, cut <-chan struct{}) {
	g.mu.Lock()
	g.pauses = append(g.pauses, d)
	g.mu.Unlock()
	select {
	case <-cut:
	case <-g.release:
	}
}

func (g *gate) asked() []time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Duration(nil), g.pauses...)
}

func waitFor(t *testing.T, what string, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // a hang guard, not a speed check
		t.Fatalf("%s never happened", what)
	}
}

// TestSaverPacing: after a save that took d the background loop pauses savePauseFactor·d (so
// it saves at most about a tenth of the time), a waiting commit cuts the pause short, and so
// does hurry for the changes left when the run's walk is over.
func TestSaverPacing(t *testing.T) {
	const d = 3 * time.Millisecond
	store := &slowStore{d: d}
	g := &gate{release: make(chan struct{})}
	sv := newSaver(store, states.New(), time.Now, nil)
	sv.wait = g.wait
	ctx := context.Background()
	first := make(chan error, 1)
	sv.commitAsync(ctx, func(*states.State) {}, func(err error) { first <- err })
	waitFor(t, "the first background save", first)
	// The loop now pauses (the gate holds it); a change made meanwhile waits for the pause.
	second := make(chan error, 1)
	sv.commitAsync(ctx, func(*states.State) {}, func(err error) { second <- err })
	select {
	case <-second:
		t.Fatal("a background change was saved without the pause")
	case <-time.After(50 * time.Millisecond):
	}
	p := g.asked()
	if len(p) != 1 || p[0] < savePauseFactor*d || p[0] > maxSavePause {
		t.Fatalf("pauses asked %v after a save of at least %v, want one of %d×", p, d, savePauseFactor)
	}
	// A caller that must wait cuts the pause: its commit returns (and the change above is saved
	// with it).
	done := make(chan error, 1)
	go func() { done <- sv.commit(ctx, func(*states.State) {}) }()
	waitFor(t, "the waiting commit", done)
	waitFor(t, "the background change", second)
	// hurry: the changes left are saved without a pause.
	third := make(chan error, 1)
	sv.commitAsync(ctx, func(*states.State) {}, func(err error) { third <- err })
	sv.hurry()
	waitFor(t, "the change after hurry", third)
	before := len(g.asked())
	fourth := make(chan error, 1)
	sv.commitAsync(ctx, func(*states.State) {}, func(err error) { fourth <- err })
	waitFor(t, "a change after hurry", fourth)
	if after := len(g.asked()); after != before {
		t.Fatalf("the loop paused %d more times after hurry", after-before)
	}
	close(g.release)
	if savePause(time.Hour) != maxSavePause {
		t.Fatalf("pause after a long save: %v, want the bound %v", savePause(time.Hour), maxSavePause)
	}
}
