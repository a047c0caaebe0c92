package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"zyvor.dev/sysbox/internal/states"
)

// Options tune a Manager.
type Options struct {
	// AllowUnsafe lets mutation proceed through a backend lacking locking or CAS
	// (--allow-unsafe-state). Only for a caller that guarantees a single writer.
	AllowUnsafe bool
	// LockTimeout is how long Begin waits for a held lock (-lock-timeout); 0 fails at once.
	LockTimeout time.Duration
	// LeaseTTL, on a backend that declares leases, makes the lock expire LeaseTTL after its
	// last renewal; the Manager renews it every LeaseTTL/3 while the operation runs, so a
	// crashed holder blocks others for at most LeaseTTL. A renewal that fails is retried
	// until the lease expires; a lost lease (expired, or refused by the backend) fails every
	// later save.
	LeaseTTL time.Duration
	// Require adds the handlers' identity requirements to the built-in ownership checks.
	Require states.Requirement
	// KeepSnapshots bounds how many snapshots are kept after taking one: 0 means
	// DefaultKeepSnapshots, a negative value keeps all.
	KeepSnapshots int
	// Now stamps snapshots and tool versions and is the clock lease expiry is judged by;
	// time.Now when nil.
	Now func() time.Time
}

// DefaultKeepSnapshots is how many snapshots a Manager keeps unless told otherwise.
const DefaultKeepSnapshots = 20

// Manager reads and changes a topology's state through one backend (S13).
type Manager struct {
	b    Backend
	opts Options
}

// NewManager returns a Manager over b.
func NewManager(b Backend, opts Options) *Manager {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.KeepSnapshots == 0 {
		opts.KeepSnapshots = DefaultKeepSnapshots
	}
	return &Manager{b: b, opts: opts}
}

// Backend returns the backend the manager uses.
func (m *Manager) Backend() Backend { return m.b }

// Read returns the stored state without locking (for read-only commands). When nothing is
// stored it returns an empty state with serial 0 and NO lineage: a lineage exists only once a
// state is saved (Begin creates it), so a plan made against "nothing" binds lineage "" — the
// same as plans.FromState(nil).
func (m *Manager) Read(ctx context.Context) (*states.State, error) {
	st, err := m.read(ctx)
	if err != nil {
		return nil, err
	}
	if st == nil {
		st = &states.State{Outputs: map[string]states.Output{}}
	}
	return st, nil
}

func (m *Manager) read(ctx context.Context) (*states.State, error) {
	d := m.b.Describe()
	st, err := m.b.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("read state from %s backend %s: %w", d.Kind, d.Location, err)
	}
	if st != nil && m.opts.Require != nil {
		if err := states.Check(st, m.opts.Require); err != nil {
			return nil, fmt.Errorf("read state from %s backend %s: %w", d.Kind, d.Location, err)
		}
	}
	return st, nil
}

// CheckMutable reports whether the manager may mutate through its backend: the backend must
// declare locking and compare-and-swap and implement Locker and Writer, unless AllowUnsafe.
// It returns an *UnsafeBackendError naming what is missing.
func (m *Manager) CheckMutable() error {
	d := m.b.Describe()
	if _, ok := m.b.(Writer); !ok {
		return &UnsupportedError{Backend: d.Kind, Capability: CAS, Hint: "this backend is read-only"}
	}
	missing := MutationCapabilities &^ d.Capabilities
	if _, ok := m.b.(Locker); !ok {
		missing |= Locking
	}
	if missing != 0 && !m.opts.AllowUnsafe {
		return &UnsafeBackendError{Backend: d.Kind, Missing: missing}
	}
	return nil
}

// Txn is one locked operation on the state: Begin locked it and read the serial; Save stores
// by CAS against the last serial read or saved; Close unlocks.
type Txn struct {
	m       *Manager
	op      string
	lockID  string
	locked  bool
	lease   *leaseKeeper
	lineage string
	serial  uint64
	state   *states.State
}

// Begin checks the backend is safe for mutation, takes the lock (waiting up to LockTimeout),
// and reads the state and its serial under the lock. Nothing is changed if any step fails. An
// empty backend yields a new state (fresh lineage, serial 0). The caller must Close the Txn.
func (m *Manager) Begin(ctx context.Context, operation string) (*Txn, error) {
	if err := m.CheckMutable(); err != nil {
		return nil, fmt.Errorf("%s: %w", operation, err)
	}
	t := &Txn{m: m, op: operation}
	if l, ok := m.b.(Locker); ok && m.b.Describe().Capabilities.Has(Locking) {
		id, lease, err := m.lockFor(ctx, l, operation)
		if err != nil {
			return nil, fmt.Errorf("%s: lock state: %w", operation, err)
		}
		t.lockID, t.locked, t.lease = id, true, lease
	}
	st, err := m.read(ctx)
	if err != nil {
		t.Close(ctx)
		return nil, fmt.Errorf("%s: %w", operation, err)
	}
	if st == nil {
		st = states.New()
	}
	t.state, t.lineage, t.serial = st, st.Lineage, st.Serial
	return t, nil
}

// State returns the state read by Begin (and updated by Save). The caller may change it and
// Save it.
func (t *Txn) State() *states.State { return t.state }

// Serial is the serial the next Save compares against.
func (t *Txn) Serial() uint64 { return t.serial }

// LockID is the ID of the lock held ("" when the backend has none and unsafe was allowed).
func (t *Txn) LockID() string { return t.lockID }

// Snapshot keeps a copy of the stored state before a destructive operation. It returns the
// zero SnapshotInfo without error when nothing is stored yet or the backend does not declare
// snapshots (then there is nothing it could keep).
func (t *Txn) Snapshot(ctx context.Context, reason string) (SnapshotInfo, error) {
	s, ok := t.m.b.(Snapshotter)
	if !ok || !t.m.b.Describe().Capabilities.Has(Snapshot) || t.serial == 0 {
		return SnapshotInfo{}, nil
	}
	info, err := s.Snapshot(ctx, reason)
	if errors.Is(err, ErrNoState) {
		return SnapshotInfo{}, nil
	}
	if err != nil {
		return SnapshotInfo{}, fmt.Errorf("%s: snapshot state: %w", t.op, err)
	}
	if err := t.m.prune(ctx); err != nil {
		return info, fmt.Errorf("%s: %w", t.op, err)
	}
	return info, nil
}

// prune keeps the newest KeepSnapshots snapshots.
func (m *Manager) prune(ctx context.Context) error {
	p, ok := m.b.(SnapshotPruner)
	if !ok || m.opts.KeepSnapshots < 0 {
		return nil
	}
	if _, err := p.PruneSnapshots(ctx, m.opts.KeepSnapshots); err != nil {
		return fmt.Errorf("prune snapshots: %w", err)
	}
	return nil
}

// Save stores st as the next serial by CAS against the serial last read or saved in this Txn.
// st must have the Txn's lineage; its Serial and ToolVersion are set by Save. It is checked
// (ownership, identity) before anything is written. On error st.Serial is left unchanged.
func (t *Txn) Save(ctx context.Context, st *states.State) error {
	if t.state == nil {
		return fmt.Errorf("%s: save state: transaction is closed", t.op)
	}
	d := t.m.b.Describe()
	if st.Lineage != t.lineage {
		return fmt.Errorf("%s: save state: %w", t.op, &LineageError{Backend: d.Kind, Stored: t.lineage, Offered: st.Lineage})
	}
	if err := states.Check(st, t.m.opts.Require); err != nil {
		return fmt.Errorf("%s: save state: %w", t.op, err)
	}
	if err := t.lease.err(); err != nil {
		return fmt.Errorf("%s: save state: %w", t.op, err)
	}
	prevSerial, prevTool := st.Serial, st.ToolVersion
	st.Serial, st.ToolVersion = t.serial+1, states.ToolVersion()
	if err := t.m.b.(Writer).Save(ctx, st, t.serial); err != nil {
		st.Serial, st.ToolVersion = prevSerial, prevTool
		return fmt.Errorf("%s: save state to %s backend %s: %w", t.op, d.Kind, d.Location, err)
	}
	t.serial, t.state = st.Serial, st
	return nil
}

// Close releases the lock. It is safe to call twice.
func (t *Txn) Close(ctx context.Context) error {
	if !t.locked {
		t.state = nil
		return nil
	}
	t.locked, t.state = false, nil
	t.lease.halt()
	// Unlock even if ctx is already cancelled: leaving a lock behind is worse.
	if err := t.m.b.(Locker).Unlock(context.WithoutCancel(ctx), t.lockID); err != nil {
		return fmt.Errorf("%s: unlock state: %w", t.op, err)
	}
	return nil
}

// Mutate runs fn on the state inside one locked transaction and saves the result by CAS. When
// destructive is set the prior state is snapshotted first. fn returning an error saves nothing.
func (m *Manager) Mutate(ctx context.Context, operation string, destructive bool, fn func(st *states.State) error) (*states.State, error) {
	t, err := m.Begin(ctx, operation)
	if err != nil {
		return nil, err
	}
	defer t.Close(ctx)
	if destructive {
		if _, err := t.Snapshot(ctx, operation); err != nil {
			return nil, err
		}
	}
	st := t.State().Clone()
	if err := fn(st); err != nil {
		return nil, fmt.Errorf("%s: %w", operation, err)
	}
	if err := t.Save(ctx, st); err != nil {
		return nil, err
	}
	if err := t.Close(ctx); err != nil {
		return st, err
	}
	return st, nil
}

// ForceUnlock removes the lock with the given ID through a backend that declares force-unlock.
func (m *Manager) ForceUnlock(ctx context.Context, id string) error {
	d := m.b.Describe()
	f, ok := m.b.(ForceUnlocker)
	if !ok || !d.Capabilities.Has(ForceUnlock) {
		hint := ""
		if d.Capabilities.Has(Locking) {
			hint = "its lock ends when the holding process exits; stop that process instead"
		}
		return &UnsupportedError{Backend: d.Kind, Capability: ForceUnlock, Hint: hint}
	}
	if err := f.ForceUnlock(ctx, id); err != nil {
		return fmt.Errorf("force-unlock %s on %s backend %s: %w", id, d.Kind, d.Location, err)
	}
	return nil
}
