package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"zyvor.dev/sysbox/internal/states"
)

// Store adapts a Manager to an executor that holds the lock for a whole run and saves many
// times by CAS (the shape internal/exec.StateStore asks for): Lock, then Read under the lock,
// Save(st, expectSerial) per change, Snapshot before destructive steps, unlock.
type Store struct {
	m *Manager

	mu     sync.Mutex
	lockID string
	locked bool
	lease  *leaseKeeper
}

// Store returns the executor-facing adapter of m.
func (m *Manager) Store() *Store { return &Store{m: m} }

// Lock checks the backend is safe for mutation (locking + CAS unless AllowUnsafe), takes the
// state lock (waiting up to LockTimeout) and returns the function that releases it.
func (s *Store) Lock(ctx context.Context, operation string) (func() error, error) {
	if err := s.m.CheckMutable(); err != nil {
		return nil, fmt.Errorf("%s: %w", operation, err)
	}
	l, ok := s.m.b.(Locker)
	if !ok || !s.m.b.Describe().Capabilities.Has(Locking) {
		return func() error { return nil }, nil // unsafe allowed: no lock to take
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.locked {
		return nil, fmt.Errorf("%s: this store already holds lock %s", operation, s.lockID)
	}
	id, lease, err := s.m.lockFor(ctx, l, operation)
	if err != nil {
		return nil, fmt.Errorf("%s: lock state: %w", operation, err)
	}
	s.lockID, s.locked, s.lease = id, true, lease
	var once sync.Once
	var uerr error
	return func() error {
		once.Do(func() {
			s.mu.Lock()
			s.locked = false
			lease := s.lease
			s.lease = nil
			s.mu.Unlock()
			lease.halt()
			uerr = l.Unlock(context.WithoutCancel(ctx), id)
		})
		return uerr
	}, nil
}

// Read returns the stored state (nil when none), checked like Manager.Read.
func (s *Store) Read(ctx context.Context) (*states.State, error) { return s.m.read(ctx) }

// Save stores st by CAS against expectSerial after the ownership and identity checks. On a
// backend with locking it refuses unless this Store holds the lock.
func (s *Store) Save(ctx context.Context, st *states.State, expectSerial uint64) error {
	d := s.m.b.Describe()
	if d.Capabilities.Has(Locking) {
		s.mu.Lock()
		locked, lease := s.locked, s.lease
		s.mu.Unlock()
		if !locked {
			return fmt.Errorf("save state: the state lock is not held (call Lock first)")
		}
		if err := lease.err(); err != nil {
			return fmt.Errorf("save state: %w", err)
		}
	}
	if err := s.m.CheckMutable(); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := states.Check(st, s.m.opts.Require); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	if err := s.m.b.(Writer).Save(ctx, st, expectSerial); err != nil {
		return fmt.Errorf("save state to %s backend %s: %w", d.Kind, d.Location, err)
	}
	return nil
}

// Snapshot keeps a copy of the stored state; nothing stored, or a backend without snapshots,
// is not an error (there is nothing to keep, or nowhere to keep it).
func (s *Store) Snapshot(ctx context.Context, reason string) error {
	sn, ok := s.m.b.(Snapshotter)
	if !ok || !s.m.b.Describe().Capabilities.Has(Snapshot) {
		return nil
	}
	if _, err := sn.Snapshot(ctx, reason); err != nil {
		if errors.Is(err, ErrNoState) {
			return nil
		}
		return fmt.Errorf("snapshot state: %w", err)
	}
	return s.m.prune(ctx)
}
