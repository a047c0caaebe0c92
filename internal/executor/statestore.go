package executor

import (
	"context"
	"fmt"
	"sync"
	"time"

	"zyvor.dev/sysbox/internal/states"
)

// StateStore is what the executor needs of the state manager (S13): an exclusive lock held for
// the whole operation, a read under that lock, compare-and-swap saves and snapshots. The
// backend Manager satisfies it through a thin adapter.
type StateStore interface {
	// Lock takes the state lock for operation; the returned func releases it.
	Lock(ctx context.Context, operation string) (unlock func() error, err error)
	// Read returns the stored state, nil when none is stored.
	Read(ctx context.Context) (*states.State, error)
	// Save stores st only if the stored serial equals expectSerial (compare-and-swap).
	Save(ctx context.Context, st *states.State, expectSerial uint64) error
	// Snapshot keeps a copy of the stored state before a destructive operation.
	Snapshot(ctx context.Context, reason string) error
}

// saver holds the run's working state and group-commits saves. A change is applied to the
// working state at once (later operations see it) and saved by a background loop: every
// change that arrived while a save was in flight goes into the next save, so concurrent
// workers share one CAS save. Callers that must not go on before their change is durable use
// commit; the others pass a callback that runs once the save including their change succeeded
// (or failed).
type saver struct {
	store StateStore
	now   func() time.Time

	mu       sync.Mutex
	st       *states.State // working state
	stored   uint64        // serial stored
	gen      uint64        // bumped by every change
	savedGen uint64
	saving   bool
	cbs      []pendingSave
	err      error // sticky
	saves    int
	after    func(point string) // Executor.AfterDurable
	// pause paces background saves: after a save that took d, the loop waits savePause(d)
	// before the next one, so that saving takes a bounded share of the run's time (a save
	// writes the whole state: O(N) each, so unpaced saves over a run of N operations would be
	// O(N²)) and each save takes in the changes of that whole pause. A synchronous commit
	// waiting, or hurry, cuts the pause short (a token in pause).
	pause   chan struct{}
	hurried bool // hurry was called: no more pauses
	// wait waits d or until cut has a token (tests replace it).
	wait func(d time.Duration, cut <-chan struct{})
	// enc keeps the encoding of unchanged resources from one save to the next, so a save
	// encodes only what changed since the last (the document is still written whole).
	enc *states.EncodeCache
}

type pendingSave struct {
	gen uint64
	fn  func(error)
}

func newSaver(store StateStore, st *states.State, now func() time.Time, after func(point string)) *saver {
	return &saver{store: store, st: st, stored: st.Serial, now: now, after: after, pause: make(chan struct{}, 1),
		enc: states.NewEncodeCache(), wait: waitOrCut}
}

// Background saves are paced so that the saver spends at most about a tenth of the run saving:
// after a save that took d it waits savePauseFactor·d, at most maxSavePause.
const (
	savePauseFactor = 9
	maxSavePause    = 2 * time.Second
)

// savePause is how long the loop waits after a save that took d.
func savePause(d time.Duration) time.Duration { return min(savePauseFactor*d, maxSavePause) }

func waitOrCut(d time.Duration, cut <-chan struct{}) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-cut:
	case <-t.C:
	}
}

// hurry ends pacing: every change still to be saved is saved without pauses (the run's walk is
// over and the run waits for its last saves).
func (s *saver) hurry() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hurried = true
	select {
	case s.pause <- struct{}{}:
	default:
	}
}

// view runs fn with the working state under the lock (fn must not keep references).
func (s *saver) view(fn func(st *states.State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.st)
}

// commit applies change and returns once it is durably saved.
func (s *saver) commit(ctx context.Context, change func(st *states.State)) error {
	ch := make(chan error, 1)
	s.commitWith(ctx, change, func(err error) { ch <- err }, true)
	return <-ch
}

// commitAsync applies change and arranges for fn (may be nil) to be called, on its own
// goroutine, once a save including the change has succeeded or saving has failed.
func (s *saver) commitAsync(ctx context.Context, change func(st *states.State), fn func(error)) {
	s.commitWith(ctx, change, fn, false)
}

func (s *saver) commitWith(ctx context.Context, change func(st *states.State), fn func(error), urgent bool) {
	s.mu.Lock()
	change(s.st)
	s.gen++
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		if fn != nil {
			go fn(err)
		}
		return
	}
	if fn != nil {
		s.cbs = append(s.cbs, pendingSave{gen: s.gen, fn: fn})
	}
	if s.saving && s.pause != nil && urgent {
		select { // a waiting caller cuts the pacing pause short
		case s.pause <- struct{}{}:
		default:
		}
	}
	if !s.saving {
		s.saving = true
		// Progress already made is saved even when the run is being cancelled.
		go s.loop(states.WithEncodeCache(context.WithoutCancel(ctx), s.enc))
	}
	s.mu.Unlock()
}

// loop saves until every change is durable (or a save fails).
func (s *saver) loop(ctx context.Context) {
	s.mu.Lock()
	for s.savedGen < s.gen && s.err == nil {
		g := s.gen
		// Changes replace resources and outputs, never edit them in place (copy on write), so
		// the list of them is a consistent snapshot to save outside the lock.
		snap := s.st.ShallowCopy()
		snap.Serial = s.stored + 1
		snap.ToolVersion = states.ToolVersion()
		prev := s.stored
		s.mu.Unlock()
		began := time.Now()
		err := s.store.Save(ctx, snap, prev)
		took := time.Since(began)
		s.mu.Lock()
		if err != nil {
			s.err = fmt.Errorf("save state (serial %d → %d): %w", prev, snap.Serial, err)
		} else {
			s.stored = snap.Serial
			s.st.Serial = snap.Serial
			s.savedGen = g
			s.saves++
			if s.after != nil {
				s.after(PointState)
			}
		}
		var ready []func(error)
		keep := s.cbs[:0]
		for _, cb := range s.cbs {
			if s.err != nil || cb.gen <= g {
				ready = append(ready, cb.fn)
			} else {
				keep = append(keep, cb)
			}
		}
		s.cbs = keep
		e := s.err
		s.mu.Unlock()
		for _, fn := range ready {
			go fn(e)
		}
		s.mu.Lock()
		if e == nil && !s.hurried {
			// Wait (the loop stays the saver: changes made meanwhile wait for it), taking in
			// more changes, unless someone waits for them.
			s.mu.Unlock()
			s.wait(savePause(took), s.pause)
			s.mu.Lock()
		}
	}
	s.saving = false
	s.mu.Unlock()
}

// serial returns the stored serial.
func (s *saver) serial() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored
}

// stats returns the number of saves.
func (s *saver) savesDone() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}
