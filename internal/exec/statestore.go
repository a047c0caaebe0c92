package exec

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

// saver holds the run's working state and group-commits saves: workers change the working
// state under the mutex, and each waits until a save that includes its change has succeeded.
// Concurrent workers share one CAS save.
type saver struct {
	store StateStore
	now   func() time.Time

	mu       sync.Mutex
	cond     *sync.Cond
	st       *states.State // working state
	stored   uint64        // serial stored
	gen      uint64        // bumped by every change
	savedGen uint64
	saving   bool
	err      error
	saves    int
	fp       *failpoint
}

func newSaver(store StateStore, st *states.State, now func() time.Time) *saver {
	s := &saver{store: store, st: st, stored: st.Serial, now: now, fp: failpointFromEnv()}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// view runs fn with the working state under the lock (fn must not keep references).
func (s *saver) view(fn func(st *states.State)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(s.st)
}

// commit applies change to the working state and returns once it is durably saved.
func (s *saver) commit(ctx context.Context, change func(st *states.State)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	change(s.st)
	s.gen++
	my := s.gen
	for s.savedGen < my && s.err == nil {
		if s.saving {
			s.cond.Wait()
			continue
		}
		s.saving = true
		g := s.gen
		snap := s.st.Clone()
		snap.Serial = s.stored + 1
		snap.ToolVersion = states.ToolVersion()
		prev := s.stored
		s.mu.Unlock()
		err := s.store.Save(ctx, snap, prev)
		s.mu.Lock()
		s.saving = false
		if err != nil {
			s.err = fmt.Errorf("save state (serial %d → %d): %w", prev, snap.Serial, err)
		} else {
			s.stored = snap.Serial
			s.st.Serial = snap.Serial
			s.savedGen = g
			s.saves++
			s.fp.hit("state")
		}
		s.cond.Broadcast()
	}
	return s.err
}

// serial returns the stored serial.
func (s *saver) serial() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored
}
