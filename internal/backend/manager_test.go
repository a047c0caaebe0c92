package backend_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/backendtest"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/backend/sqlite"
	"zyvor.dev/sysbox/internal/states"
)

func newLocal(t *testing.T) *local.Backend {
	b, err := local.New(filepath.Join(t.TempDir(), "s.sbxstate"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func seed(t *testing.T, m *backend.Manager, addrs ...string) *states.State {
	st, err := m.Mutate(context.Background(), "apply", false, func(st *states.State) error {
		for _, a := range addrs {
			st.Set(backendtest.Resource(st.Lineage, a))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRequireRefusesBeforeMutation(t *testing.T) {
	b := newLocal(t)
	seed(t, backend.NewManager(b, backend.Options{}), "sysbox_node.web", "sysbox_network.lan")
	needsIP := func(r *states.Resource) []string {
		if r.Addr.Resource.Type == "sysbox_node" && !strings.Contains(string(r.Attributes), `"ipv4"`) {
			return []string{"attributes.ipv4"}
		}
		return nil
	}
	m := backend.NewManager(b, backend.Options{Require: needsIP})
	_, err := m.Mutate(context.Background(), "apply", true, func(*states.State) error {
		t.Fatal("mutation ran on a state the schema refuses")
		return nil
	})
	if !errors.Is(err, states.ErrIncompatible) || !strings.Contains(err.Error(), "sysbox_node.web: missing attributes.ipv4") {
		t.Fatalf("got %v, want ErrIncompatible naming sysbox_node.web attributes.ipv4", err)
	}
	if snaps, _ := b.Snapshots(context.Background()); len(snaps) != 0 {
		t.Fatalf("got %d snapshots, want none before a refused mutation", len(snaps))
	}
	if _, err := m.Read(context.Background()); !errors.Is(err, states.ErrIncompatible) {
		t.Fatalf("Read: got %v, want ErrIncompatible", err)
	}
}

func TestTxnSaveRefusesOtherLineageAndKeepsSerial(t *testing.T) {
	ctx := context.Background()
	m := backend.NewManager(newLocal(t), backend.Options{})
	seed(t, m, "sysbox_node.web")
	tx, err := m.Begin(ctx, "apply")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close(ctx)
	other := states.New()
	other.Serial = 9
	if err := tx.Save(ctx, other); !errors.Is(err, backend.ErrConflict) || other.Serial != 9 {
		t.Fatalf("got %v (serial now %d), want a lineage conflict leaving serial 9", err, other.Serial)
	}
	if err := tx.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Save(ctx, tx.State()); err == nil {
		t.Fatalf("save after Close: got nil, want an error")
	}
	if err := tx.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestBeginWaitsForLockTimeout(t *testing.T) {
	ctx := context.Background()
	b := newLocal(t)
	m := backend.NewManager(b, backend.Options{})
	tx, err := m.Begin(ctx, "apply")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		tx.Close(ctx)
	}()
	waiting := backend.NewManager(newLocalAt(t, b.Path()), backend.Options{LockTimeout: 10 * time.Second})
	tx2, err := waiting.Begin(ctx, "destroy")
	if err != nil {
		t.Fatalf("Begin with -lock-timeout 10s: %v", err)
	}
	tx2.Close(ctx)
	impatient := backend.NewManager(newLocalAt(t, b.Path()), backend.Options{})
	tx3, _ := m.Begin(ctx, "apply")
	defer tx3.Close(ctx)
	if _, err := impatient.Begin(ctx, "destroy"); !errors.Is(err, backend.ErrLocked) || !strings.Contains(err.Error(), `for "apply"`) {
		t.Fatalf("got %v, want ErrLocked naming the apply holding it", err)
	}
}

func newLocalAt(t *testing.T, p string) *local.Backend {
	b, err := local.New(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func TestCapabilityString(t *testing.T) {
	tests := []struct {
		c    backend.Capability
		want string
	}{
		{0, "none"},
		{backend.Locking | backend.CAS, "locking, compare-and-swap"},
		{backend.ForceUnlock | backend.Snapshot, "snapshot, force-unlock"},
	}
	for _, tt := range tests {
		if got := tt.c.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}

func TestStoreAdapter(t *testing.T) {
	ctx := context.Background()
	b := newLocal(t)
	s := backend.NewManager(b, backend.Options{}).Store()
	st := states.New()
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.web"))
	st.Serial = 1
	if err := s.Save(ctx, st, 0); err == nil || !strings.Contains(err.Error(), "lock is not held") {
		t.Fatalf("save without lock: got %v, want refusal", err)
	}
	unlock, err := s.Lock(ctx, "apply")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Read(ctx); got != nil || err != nil {
		t.Fatalf("empty: got %v %v, want nil nil", got, err)
	}
	if err := s.Snapshot(ctx, "nothing yet"); err != nil {
		t.Fatalf("snapshot of nothing: %v", err)
	}
	if err := s.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(ctx, "before destroy"); err != nil {
		t.Fatal(err)
	}
	st2 := st.Clone()
	st2.Serial = 2
	if err := s.Save(ctx, st2, 0); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("stale expectSerial: got %v, want ErrConflict", err)
	}
	if _, err := backend.NewManager(newLocalAt(t, b.Path()), backend.Options{}).Begin(ctx, "destroy"); !errors.Is(err, backend.ErrLocked) {
		t.Fatalf("while the store holds the lock: got %v, want ErrLocked", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	if err := unlock(); err != nil {
		t.Fatalf("second unlock: %v", err)
	}
	if snaps, _ := b.Snapshots(ctx); len(snaps) != 1 || snaps[0].Serial != 1 {
		t.Fatalf("got %+v, want one snapshot at serial 1", snaps)
	}
}

func TestLeaseRenewedWhileHeldAndLostLeaseRefusesSave(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "s.db")
	open := func() backend.Backend {
		b, err := sqlite.New(ctx, p, "")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	// A 3 s lease: the Manager renews every TTL/3 and gives each renewal TTL/3 to finish, so a
	// shorter one lets an SQLite write stalled by a loaded CI disk count as a lost lease.
	const ttl = 3 * time.Second
	m := backend.NewManager(open(), backend.Options{LeaseTTL: ttl})
	tx, err := m.Begin(ctx, "apply")
	if err != nil {
		t.Fatal(err)
	}
	other := open()
	time.Sleep(2*ttl + 500*time.Millisecond) // > 2 TTLs: only renewal keeps it held
	if _, err := other.(backend.Locker).Lock(ctx, backend.NewLockInfo("destroy")); !errors.Is(err, backend.ErrLocked) {
		t.Fatalf("lease held and renewed: got %v, want ErrLocked", err)
	}
	st := tx.State()
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.web"))
	if err := tx.Save(ctx, st); err != nil {
		t.Fatalf("save under a renewed lease: %v", err)
	}
	// The operator force-unlocks it: the renewal notices, and the next save is refused.
	if err := backend.NewManager(other, backend.Options{}).ForceUnlock(ctx, tx.LockID()); err != nil {
		t.Fatal(err)
	}
	// The next renewal (within TTL/3, later on a loaded host) notices; from then on every save
	// is refused. Wait for that rather than for a fixed time.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := tx.Save(ctx, st)
		if errors.Is(err, backend.ErrLockID) && strings.Contains(err.Error(), "lease") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("save 30 s after the lease was lost: got %v, want a lost-lease error", err)
		}
	}
	tx.Close(ctx)
}

func TestReadOfNothingHasNoLineage(t *testing.T) {
	ctx := context.Background()
	m := backend.NewManager(newLocal(t), backend.Options{})
	st, err := m.Read(ctx)
	if err != nil || st == nil || st.Lineage != "" || st.Serial != 0 || st.Outputs == nil || len(st.Resources) != 0 {
		t.Fatalf("got %+v %v, want an empty state without lineage", st, err)
	}
	tx, err := m.Begin(ctx, "apply")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close(ctx)
	if tx.State().Lineage == "" {
		t.Fatalf("Begin on nothing: got no lineage, want a fresh one to save under")
	}
}

func TestManagerKeepsSnapshotsBounded(t *testing.T) {
	ctx := context.Background()
	b := newLocal(t)
	m := backend.NewManager(b, backend.Options{KeepSnapshots: 3})
	seed(t, m, "sysbox_node.web")
	for i := range 6 {
		if _, err := m.Mutate(ctx, "state rm", true, func(st *states.State) error {
			st.Resources[0].UpdatedAt = time.Now().Add(time.Duration(i) * time.Second)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	snaps, err := b.Snapshots(ctx)
	if err != nil || len(snaps) != 3 || snaps[2].Serial != 6 || snaps[0].Serial != 4 {
		t.Fatalf("got %+v %v, want the 3 newest snapshots (serials 4..6)", snaps, err)
	}
}
