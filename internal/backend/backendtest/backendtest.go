package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Opener opens a backend from its settings, in the test process and in child processes.
type Opener func(settings map[string]string) (backend.Backend, error)

// Harness adapts one backend to the suite.
type Harness struct {
	// Settings returns settings naming a fresh, empty state for one test.
	Settings func(t *testing.T) map[string]string
	Open     Opener
	// WriteRaw replaces the stored state document with data, bypassing every check (to
	// simulate a torn write, a bit flip, a newer sysbox, an old state without ownership).
	WriteRaw func(t *testing.T, settings map[string]string, data []byte)
}

// Resource returns a managed resource at addr with complete ownership for lineage.
func Resource(lineage, addr string) *states.Resource {
	a := addrs.MustParseInstance(addr)
	now := time.Now().UTC().Truncate(time.Second)
	return &states.Resource{
		Addr: a, SchemaVersion: 1, Driver: "fake", ExternalID: "ext-" + a.String(),
		Attributes:  json.RawMessage(`{"cidr":"198.51.100.0/24"}`),
		Observation: states.Observation{Status: substrate.Present, At: now},
		Owner:       substrate.Owner{Topology: lineage, Address: a.String(), Type: a.Resource.Type, Generation: 1},
		Private:     &substrate.Envelope{Driver: "fake", Version: 1, Data: json.RawMessage(`{"k":"v"}`)},
		CreatedAt:   now, UpdatedAt: now,
	}
}

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"EmptyRead", testEmptyRead},
		{"SaveReadRoundTrip", testRoundTrip},
		{"CASConflict", testCASConflict},
		{"LineageMismatch", testLineage},
		{"LockExclusive", testLockExclusive},
		{"LockTimeout", testLockTimeout},
		{"ForceUnlock", testForceUnlock},
		{"Snapshots", testSnapshots},
		{"Deletion", testDeletion},
		{"ManagerTxn", testManager},
		{"DamagedStateRefused", testDamaged},
		{"RestoreSnapshot", testRestore},
		{"ProcessLockHolder", testProcessLock},
		{"ProcessCrashedHolder", testProcessCrash},
		{"ProcessConcurrentCAS", testProcessCAS},
		{"ProcessKilledMidSave", testProcessKilledMidSave},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, h) })
	}
}

func open(t *testing.T, h Harness, settings map[string]string) backend.Backend {
	t.Helper()
	b, err := h.Open(settings)
	if err != nil {
		t.Fatalf("open backend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func fresh(t *testing.T, h Harness) (backend.Backend, map[string]string) {
	s := h.Settings(t)
	return open(t, h, s), s
}

func writer(t *testing.T, b backend.Backend) backend.Writer {
	t.Helper()
	w, ok := b.(backend.Writer)
	if !ok || !b.Describe().Capabilities.Has(backend.CAS) {
		t.Fatalf("%s backend: does not declare compare-and-swap; every conformance backend must", b.Describe().Kind)
	}
	return w
}

func locker(t *testing.T, b backend.Backend) backend.Locker {
	t.Helper()
	l, ok := b.(backend.Locker)
	if !ok || !b.Describe().Capabilities.Has(backend.Locking) {
		t.Fatalf("%s backend: does not declare locking; every conformance backend must", b.Describe().Kind)
	}
	return l
}

func newState(n int) *states.State {
	st := states.New()
	for i := range n {
		st.Set(Resource(st.Lineage, fmt.Sprintf("sysbox_node.n[%d]", i)))
	}
	st.Outputs["ip"] = states.Output{Value: json.RawMessage(`"198.51.100.7"`)}
	st.Serial = 1
	return st
}

func encode(t *testing.T, st *states.State) string {
	t.Helper()
	b, err := states.Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func read(t *testing.T, b backend.Backend) *states.State {
	t.Helper()
	st, err := b.Read(context.Background())
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return st
}

func testEmptyRead(t *testing.T, h Harness) {
	b, _ := fresh(t, h)
	if st := read(t, b); st != nil {
		t.Fatalf("got state serial %d, want nil for an empty backend", st.Serial)
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	b, _ := fresh(t, h)
	st := newState(3)
	if err := writer(t, b).Save(context.Background(), st, 0); err != nil {
		t.Fatal(err)
	}
	if got, want := encode(t, read(t, b)), encode(t, st); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func testCASConflict(t *testing.T, h Harness) {
	ctx := context.Background()
	b, _ := fresh(t, h)
	w := writer(t, b)
	if err := w.Save(ctx, newState(1), 0); err != nil {
		t.Fatal(err)
	}
	a, c := read(t, b), read(t, b) // two writers read serial 1
	a.Set(Resource(a.Lineage, "sysbox_node.from_a"))
	a.Serial = 2
	if err := w.Save(ctx, a, 1); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	c.Set(Resource(c.Lineage, "sysbox_node.from_c"))
	c.Serial = 2
	err := w.Save(ctx, c, 1)
	var ce *backend.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, backend.ErrConflict) || ce.Expected != 1 || ce.Actual != 2 {
		t.Fatalf("second writer: got %v, want *ConflictError expected 1 actual 2", err)
	}
	// Nothing of the loser was stored; the winner's update is intact.
	got := read(t, b)
	if got.Serial != 2 || got.Resource(addrs.MustParseInstance("sysbox_node.from_a")) == nil || got.Resource(addrs.MustParseInstance("sysbox_node.from_c")) != nil {
		t.Fatalf("after conflict: got serial %d, addresses %v; want serial 2 with from_a only", got.Serial, got.Addresses())
	}
	// The loser re-reads and retries: both updates survive.
	got.Set(Resource(got.Lineage, "sysbox_node.from_c"))
	got.Serial = 3
	if err := w.Save(ctx, got, 2); err != nil {
		t.Fatalf("retry: %v", err)
	}
	if fin := read(t, b); fin.Serial != 3 || len(fin.Resources) != 3 {
		t.Fatalf("got serial %d and %v, want serial 3 with 3 resources", fin.Serial, fin.Addresses())
	}
	// Creating again over an existing state is a conflict too.
	if err := w.Save(ctx, newState(1), 0); !errors.As(err, &ce) || ce.Expected != 0 || ce.Actual != 3 {
		t.Fatalf("create over existing: got %v, want *ConflictError expected 0 actual 3", err)
	}
	// A serial that does not grow is refused.
	if err := w.Save(ctx, got, 3); err == nil {
		t.Fatalf("save with serial 3 expecting 3: got nil, want an error")
	}
}

func testLineage(t *testing.T, h Harness) {
	ctx := context.Background()
	b, _ := fresh(t, h)
	w := writer(t, b)
	first := newState(1)
	if err := w.Save(ctx, first, 0); err != nil {
		t.Fatal(err)
	}
	other := newState(1)
	other.Serial = 2
	var le *backend.LineageError
	if err := w.Save(ctx, other, 1); !errors.As(err, &le) || le.Stored != first.Lineage {
		t.Fatalf("got %v, want *LineageError naming stored lineage %s", err, first.Lineage)
	}
	if got := read(t, b); got.Lineage != first.Lineage || got.Serial != 1 {
		t.Fatalf("got lineage %s serial %d, want the first state untouched", got.Lineage, got.Serial)
	}
}

func testLockExclusive(t *testing.T, h Harness) {
	ctx := context.Background()
	b, s := fresh(t, h)
	l := locker(t, b)
	info := backend.NewLockInfo("apply")
	id, err := l.Lock(ctx, info)
	if err != nil {
		t.Fatal(err)
	}
	// A second handle on the same state (and the same handle) must be refused, naming the holder.
	for name, other := range map[string]backend.Locker{"same handle": l, "second handle": locker(t, open(t, h, s))} {
		_, err := other.Lock(ctx, backend.NewLockInfo("destroy"))
		var le *backend.LockedError
		if !errors.As(err, &le) || !errors.Is(err, backend.ErrLocked) {
			t.Fatalf("%s: got %v, want *LockedError", name, err)
		}
		if le.Holder.ID != id || le.Holder.Operation != "apply" || le.Holder.PID != os.Getpid() || !strings.Contains(err.Error(), id) {
			t.Fatalf("%s: got holder %+v (%v), want lock %s for apply by pid %d", name, le.Holder, err, id, os.Getpid())
		}
	}
	if err := l.Unlock(ctx, "not-the-id"); !errors.Is(err, backend.ErrLockID) {
		t.Fatalf("unlock with a wrong ID: got %v, want ErrLockID", err)
	}
	if err := l.Unlock(ctx, id); err != nil {
		t.Fatal(err)
	}
	id2, err := l.Lock(ctx, backend.NewLockInfo("refresh"))
	if err != nil {
		t.Fatalf("relock after unlock: %v", err)
	}
	if id2 == id {
		t.Fatalf("got the same lock ID %s twice, want a fresh one", id)
	}
	if err := l.Unlock(ctx, id2); err != nil {
		t.Fatal(err)
	}
}

func testLockTimeout(t *testing.T, h Harness) {
	ctx := context.Background()
	b, s := fresh(t, h)
	l := locker(t, b)
	id, err := l.Lock(ctx, backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatal(err)
	}
	other := locker(t, open(t, h, s))
	start := time.Now()
	_, err = backend.LockWait(ctx, other, backend.NewLockInfo("plan"), 150*time.Millisecond)
	if waited := time.Since(start); !errors.Is(err, backend.ErrLocked) || waited < 150*time.Millisecond {
		t.Fatalf("got %v after %s, want ErrLocked after waiting at least 150ms", err, waited)
	}
	go func() {
		time.Sleep(200 * time.Millisecond)
		l.Unlock(ctx, id)
	}()
	id2, err := backend.LockWait(ctx, other, backend.NewLockInfo("plan"), 10*time.Second)
	if err != nil {
		t.Fatalf("waiting for a lock released after 200ms: %v", err)
	}
	other.Unlock(ctx, id2)
}

func testForceUnlock(t *testing.T, h Harness) {
	ctx := context.Background()
	b, s := fresh(t, h)
	l := locker(t, b)
	id, err := l.Lock(ctx, backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx, id)
	op := backend.NewManager(open(t, h, s), backend.Options{})
	if !b.Describe().Capabilities.Has(backend.ForceUnlock) {
		var ue *backend.UnsupportedError
		if err := op.ForceUnlock(ctx, id); !errors.As(err, &ue) || ue.Capability != backend.ForceUnlock {
			t.Fatalf("got %v, want *UnsupportedError for force-unlock", err)
		}
		return
	}
	if err := op.ForceUnlock(ctx, "wrong-id"); !errors.Is(err, backend.ErrLockID) || !strings.Contains(err.Error(), id) {
		t.Fatalf("wrong ID: got %v, want ErrLockID naming the held lock %s", err, id)
	}
	if err := op.ForceUnlock(ctx, id); err != nil {
		t.Fatalf("force-unlock: %v", err)
	}
	l2 := locker(t, op.Backend())
	id2, err := l2.Lock(ctx, backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatalf("lock after force-unlock: %v", err)
	}
	l2.Unlock(ctx, id2)
	// The original holder's unlock now finds its lock gone.
	if err := l.Unlock(ctx, id); err == nil {
		t.Fatalf("unlock of a force-unlocked lock: got nil, want an error")
	}
}

func testSnapshots(t *testing.T, h Harness) {
	ctx := context.Background()
	b, _ := fresh(t, h)
	sn, ok := b.(backend.Snapshotter)
	if !ok || !b.Describe().Capabilities.Has(backend.Snapshot) {
		t.Fatalf("%s backend: does not declare snapshot; every conformance backend must", b.Describe().Kind)
	}
	if _, err := sn.Snapshot(ctx, "nothing yet"); !errors.Is(err, backend.ErrNoState) {
		t.Fatalf("snapshot of nothing: got %v, want ErrNoState", err)
	}
	w := writer(t, b)
	st := newState(2)
	if err := w.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	want := encode(t, st)
	info, err := sn.Snapshot(ctx, "before destroy")
	if err != nil {
		t.Fatal(err)
	}
	if info.Serial != 1 || info.Lineage != st.Lineage || info.ID == "" {
		t.Fatalf("got %+v, want serial 1 lineage %s", info, st.Lineage)
	}
	next := st.Clone()
	next.Resources = nil
	next.Serial = 2
	if err := w.Save(ctx, next, 1); err != nil {
		t.Fatal(err)
	}
	list, err := sn.Snapshots(ctx)
	if err != nil || len(list) != 1 || list[0].ID != info.ID || list[0].Serial != 1 || list[0].Lineage != st.Lineage {
		t.Fatalf("got %+v %v, want one snapshot %s at serial 1", list, err, info.ID)
	}
	old, err := sn.ReadSnapshot(ctx, info.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := encode(t, old); got != want {
		t.Fatalf("snapshot content: got\n%s\nwant\n%s", got, want)
	}
	if _, err := sn.ReadSnapshot(ctx, "s9-nope"); err == nil {
		t.Fatalf("reading a missing snapshot: got nil, want an error")
	}
	// Retention: keep the newest two of four.
	p, ok := b.(backend.SnapshotPruner)
	if !ok {
		t.Fatalf("%s backend: cannot prune snapshots", b.Describe().Kind)
	}
	for range 3 {
		time.Sleep(2 * time.Millisecond) // distinct creation times
		if _, err := sn.Snapshot(ctx, "more"); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := sn.Snapshots(ctx)
	removed, err := p.PruneSnapshots(ctx, 2)
	after, _ := sn.Snapshots(ctx)
	if err != nil || removed != 2 || len(before) != 4 || len(after) != 2 || after[0].ID != before[2].ID || after[1].ID != before[3].ID {
		t.Fatalf("prune to 2: removed %d (%v), got %+v, want the newest two of %+v", removed, err, after, before)
	}
}

func testDeletion(t *testing.T, h Harness) {
	ctx := context.Background()
	b, _ := fresh(t, h)
	d, ok := b.(backend.Deleter)
	if !ok || !b.Describe().Capabilities.Has(backend.Deletion) {
		t.Fatalf("%s backend: does not declare deletion; every conformance backend must", b.Describe().Kind)
	}
	if err := d.Delete(ctx, 0); !errors.Is(err, backend.ErrNoState) {
		t.Fatalf("delete nothing: got %v, want ErrNoState", err)
	}
	if err := writer(t, b).Save(ctx, newState(1), 0); err != nil {
		t.Fatal(err)
	}
	var ce *backend.ConflictError
	if err := d.Delete(ctx, 7); !errors.As(err, &ce) || ce.Actual != 1 {
		t.Fatalf("delete with a stale serial: got %v, want *ConflictError actual 1", err)
	}
	if read(t, b) == nil {
		t.Fatalf("a refused delete removed the state")
	}
	if err := d.Delete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if st := read(t, b); st != nil {
		t.Fatalf("after delete: got serial %d, want no state", st.Serial)
	}
	if err := writer(t, b).Save(ctx, newState(1), 0); err != nil {
		t.Fatalf("create after delete: %v", err)
	}
}

func testManager(t *testing.T, h Harness) {
	ctx := context.Background()
	_, s := fresh(t, h)
	m := backend.NewManager(open(t, h, s), backend.Options{})
	tx, err := m.Begin(ctx, "apply")
	if err != nil {
		t.Fatal(err)
	}
	st := tx.State()
	if tx.Serial() != 0 || st.Serial != 0 {
		t.Fatalf("got serial %d, want 0 for an empty backend", tx.Serial())
	}
	// Another manager cannot begin while this one holds the lock.
	m2 := backend.NewManager(open(t, h, s), backend.Options{})
	if _, err := m2.Begin(ctx, "destroy"); !errors.Is(err, backend.ErrLocked) || !strings.Contains(err.Error(), tx.LockID()) {
		t.Fatalf("second Begin: got %v, want ErrLocked naming %s", err, tx.LockID())
	}
	// Incremental saves inside one transaction each CAS on the previous serial.
	for i := range 3 {
		st.Set(Resource(st.Lineage, fmt.Sprintf("sysbox_network.net[%d]", i)))
		if err := tx.Save(ctx, st); err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
	}
	// Ownership is checked before writing.
	bad := st.Clone()
	bad.Set(&states.Resource{Addr: addrs.MustParseInstance("sysbox_node.orphan"), SchemaVersion: 1, Observation: states.Observation{Status: substrate.Present}})
	if err := tx.Save(ctx, bad); !errors.Is(err, states.ErrIncompatible) {
		t.Fatalf("saving a resource without owner: got %v, want ErrIncompatible", err)
	}
	if err := tx.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := read(t, m.Backend()); got.Serial != 3 || len(got.Resources) != 3 {
		t.Fatalf("got serial %d with %d resources, want 3 and 3", got.Serial, len(got.Resources))
	}
	// Mutate (destructive) snapshots first and saves by CAS.
	a := addrs.MustParseInstance("sysbox_network.net[0]")
	got, err := m2.Mutate(ctx, "state rm", true, func(st *states.State) error {
		if !st.Remove(a) {
			return fmt.Errorf("%s missing", a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Serial != 4 || got.Resource(a) != nil {
		t.Fatalf("after Mutate: got serial %d, want 4 without %s", got.Serial, a)
	}
	snaps, err := m2.Backend().(backend.Snapshotter).Snapshots(ctx)
	if err != nil || len(snaps) != 1 || snaps[0].Serial != 3 {
		t.Fatalf("got snapshots %+v %v, want one at serial 3 taken before state rm", snaps, err)
	}
	// A failing fn saves nothing.
	if _, err := m2.Mutate(ctx, "state rm", false, func(*states.State) error { return errors.New("no") }); err == nil {
		t.Fatalf("Mutate with failing fn: got nil error")
	}
	if got := read(t, m.Backend()); got.Serial != 4 {
		t.Fatalf("got serial %d after a failed Mutate, want 4", got.Serial)
	}
}

func testDamaged(t *testing.T, h Harness) {
	if h.WriteRaw == nil {
		t.Fatalf("harness has no WriteRaw: every conformance backend must let the suite damage its stored document")
	}
	good := newState(2)
	goodDoc := encode(t, good)
	noOwner := good.Clone()
	noOwner.Resources[0].Owner = substrate.Owner{}
	noOwnerDoc := encode(t, noOwner)
	tests := []struct {
		name string
		data string
		is   error
	}{
		{"torn write", goodDoc[:len(goodDoc)*2/3], durable.ErrCorrupt},
		{"bit flip", strings.Replace(goodDoc, "198.51.100.0/24", "198.51.100.8/24", 1), durable.ErrCorrupt},
		{"newer format version", strings.Replace(goodDoc, `"format_version": 1`, `"format_version": 99`, 1), durable.ErrUnknownVersion},
		{"missing ownership", noOwnerDoc, states.ErrIncompatible},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			b, s := fresh(t, h)
			if err := writer(t, b).Save(ctx, good, 0); err != nil {
				t.Fatal(err)
			}
			h.WriteRaw(t, s, []byte(tt.data))
			if st, err := b.Read(ctx); st != nil || !errors.Is(err, tt.is) {
				t.Fatalf("Read: got %v, %v; want nil and %v", st, err, tt.is)
			}
			m := backend.NewManager(b, backend.Options{})
			if _, err := m.Mutate(ctx, "apply", true, func(*states.State) error {
				t.Fatalf("a mutation reached a damaged state")
				return nil
			}); !errors.Is(err, tt.is) {
				t.Fatalf("Mutate: got %v, want %v", err, tt.is)
			}
			if snaps, _ := b.(backend.Snapshotter).Snapshots(ctx); len(snaps) != 0 {
				t.Fatalf("got %d snapshots, want none from a refused mutation", len(snaps))
			}
			// The refusal changed nothing: the lock is free again.
			id, err := locker(t, b).Lock(ctx, backend.NewLockInfo("check"))
			if err != nil {
				t.Fatalf("lock after a refused mutation: %v", err)
			}
			locker(t, b).Unlock(ctx, id)
		})
	}
}

func testRestore(t *testing.T, h Harness) {
	ctx := context.Background()
	b, s := fresh(t, h)
	m := backend.NewManager(b, backend.Options{})
	good := newState(3)
	if err := writer(t, b).Save(ctx, good, 0); err != nil {
		t.Fatal(err)
	}
	snap, err := b.(backend.Snapshotter).Snapshot(ctx, "before destroy")
	if err != nil {
		t.Fatal(err)
	}
	// A later, good state: restore keeps it as a snapshot of its own.
	later := good.Clone()
	later.Resources = later.Resources[:1]
	later.Serial = 2
	if err := writer(t, b).Save(ctx, later, 1); err != nil {
		t.Fatal(err)
	}
	st, err := m.Restore(ctx, snap.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := read(t, b)
	if got.Serial != 3 || st.Serial != 3 || len(got.Resources) != 3 || got.Lineage != good.Lineage {
		t.Fatalf("after restore: got serial %d with %d resources, want serial 3 with the snapshot's 3", got.Serial, len(got.Resources))
	}
	if list, _ := b.(backend.Snapshotter).Snapshots(ctx); len(list) != 2 || list[1].Serial != 2 {
		t.Fatalf("got snapshots %+v, want the restored-over serial 2 kept", list)
	}
	// Over a damaged current document (a torn tail): restore repairs it.
	doc := encode(t, got)
	h.WriteRaw(t, s, []byte(doc[:len(doc)*3/4]))
	if _, err := b.Read(ctx); !errors.Is(err, durable.ErrCorrupt) {
		t.Fatalf("damaged: got %v, want ErrCorrupt", err)
	}
	if _, err := m.Restore(ctx, snap.ID); err != nil {
		t.Fatalf("restore over a damaged state: %v", err)
	}
	if got := read(t, b); got.Serial != 4 || len(got.Resources) != 3 {
		t.Fatalf("after repair: got serial %d with %d resources, want 4 and 3", got.Serial, len(got.Resources))
	}
	// Never over a newer sysbox's state, never across lineages.
	h.WriteRaw(t, s, []byte(strings.Replace(doc, `"format_version": 1`, `"format_version": 7`, 1)))
	if _, err := m.Restore(ctx, snap.ID); !errors.Is(err, durable.ErrUnknownVersion) {
		t.Fatalf("over a newer format: got %v, want ErrUnknownVersion", err)
	}
	other := newState(1)
	h.WriteRaw(t, s, []byte(encode(t, other)))
	if _, err := m.Restore(ctx, snap.ID); !errors.Is(err, backend.ErrConflict) {
		t.Fatalf("over another lineage: got %v, want a lineage conflict", err)
	}
	if _, err := m.Restore(ctx, "12345"); err == nil {
		t.Fatalf("restoring a missing snapshot: got nil error")
	}
}
