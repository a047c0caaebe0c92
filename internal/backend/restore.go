package backend

import (
	"context"
	"errors"
	"fmt"

	"zyvor.dev/sysbox/internal/states"
)

// Restore makes snapshot id the current state again, under the lock and by CAS: the restored
// state gets a serial above both the stored one and the snapshot's, keeps the snapshot's
// lineage (a snapshot of another topology is refused), and passes the same checks as any save.
// A readable current state is snapshotted first, so a restore can itself be undone. It works
// over a damaged current document as long as its header (serial, lineage) is readable, and
// never over a document of an unknown format version.
func (m *Manager) Restore(ctx context.Context, id string) (*states.State, error) {
	const op = "state restore"
	d := m.b.Describe()
	sn, ok := m.b.(Snapshotter)
	if !ok || !d.Capabilities.Has(Snapshot) {
		return nil, fmt.Errorf("%s: %w", op, &UnsupportedError{Backend: d.Kind, Capability: Snapshot})
	}
	sr, ok := m.b.(SerialReader)
	if !ok {
		return nil, fmt.Errorf("%s: %s backend cannot read a stored serial without decoding the state", op, d.Kind)
	}
	if err := m.CheckMutable(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if l, ok := m.b.(Locker); ok && d.Capabilities.Has(Locking) {
		lockID, lease, err := m.lockFor(ctx, l, op)
		if err != nil {
			return nil, fmt.Errorf("%s: lock state: %w", op, err)
		}
		defer func() {
			lease.halt()
			l.Unlock(context.WithoutCancel(ctx), lockID)
		}()
	}
	snap, err := sn.ReadSnapshot(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, id, err)
	}
	stored, lineage, exists, err := sr.StoredSerial(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, id, err)
	}
	if exists && lineage != snap.Lineage {
		return nil, fmt.Errorf("%s %s: %w", op, id, &LineageError{Backend: d.Kind, Stored: lineage, Offered: snap.Lineage})
	}
	if exists {
		if _, err := m.b.Read(ctx); err == nil {
			if _, err := sn.Snapshot(ctx, "before restore of "+id); err != nil && !errors.Is(err, ErrNoState) {
				return nil, fmt.Errorf("%s %s: snapshot the current state: %w", op, id, err)
			}
		}
	}
	st := snap.Clone()
	st.Serial = max(stored, snap.Serial) + 1
	st.ToolVersion = states.ToolVersion()
	if err := states.Check(st, m.opts.Require); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, id, err)
	}
	if err := m.b.(Writer).Save(ctx, st, stored); err != nil {
		return nil, fmt.Errorf("%s %s: save to %s backend %s: %w", op, id, d.Kind, d.Location, err)
	}
	return st, nil
}
