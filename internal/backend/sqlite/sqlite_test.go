package sqlite

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/backendtest"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/states"
)

func open(settings map[string]string) (backend.Backend, error) {
	return Open(context.Background(), settings)
}

func TestMain(m *testing.M) { backendtest.Main(m, open) }

func TestConformance(t *testing.T) {
	backendtest.Run(t, backendtest.Harness{
		Settings: func(t *testing.T) map[string]string {
			return map[string]string{"path": filepath.Join(t.TempDir(), "state.db"), "name": "lab"}
		},
		Open: open,
		WriteRaw: func(t *testing.T, settings map[string]string, data []byte) {
			b, err := Open(context.Background(), settings)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := b.DB().Exec(`UPDATE sysbox_states SET data = ? WHERE name = ?`, data, settings["name"]); err != nil {
				t.Fatal(err)
			}
			// A row written by any sysbox has columns matching its document's header.
			if h, err := states.ReadHeader(bytes.NewReader(data)); err == nil {
				if _, err := b.DB().Exec(`UPDATE sysbox_states SET lineage = ?, serial = ? WHERE name = ?`, h.Lineage, int64(h.Serial), settings["name"]); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}

func TestStatesShareOneDatabase(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "state.db")
	a, err := New(ctx, p, "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(ctx, p, "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st := states.New()
	st.Serial = 1
	if err := a.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Read(ctx); got != nil || err != nil {
		t.Fatalf("state b: got %v %v, want empty", got, err)
	}
	if _, err := a.Lock(ctx, backend.NewLockInfo("apply")); err != nil {
		t.Fatal(err)
	}
	if id, err := b.Lock(ctx, backend.NewLockInfo("apply")); err != nil {
		t.Fatalf("locking state b while a is locked: %v", err)
	} else {
		b.Unlock(ctx, id)
	}
}

func TestCorruptRowRefused(t *testing.T) {
	ctx := context.Background()
	b := savedOne(t)
	if _, err := b.DB().Exec(`UPDATE sysbox_states SET data = substr(data, 1, 200)`); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Read(ctx); got != nil || !errors.Is(err, durable.ErrCorrupt) {
		t.Fatalf("got %v, %v; want ErrCorrupt", got, err)
	}
}

func TestLeaseExpiresAndRenews(t *testing.T) {
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "state.db")
	a, err := New(ctx, p, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(ctx, p, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	info := backend.NewLockInfo("apply")
	// Each check waits for a point in time measured around the calls it depends on, with
	// seconds of margin on both sides: a loaded CI machine may stall a goroutine or an SQLite
	// write for a while.
	info.TTL = 3 * time.Second
	taking := time.Now()
	id, err := a.Lock(ctx, info)
	if err != nil {
		t.Fatal(err)
	}
	taken := time.Now() // the first lease ends between taking+3s and taken+3s
	if _, err := b.Lock(ctx, backend.NewLockInfo("apply")); !errors.Is(err, backend.ErrLocked) || !strings.Contains(err.Error(), "lease expires") {
		t.Fatalf("live lease: got %v, want ErrLocked naming the lease expiry", err)
	}
	time.Sleep(time.Until(taking.Add(time.Second)))
	renewing := time.Now()
	if err := a.RenewLock(ctx, id, 5*time.Second); err != nil {
		t.Fatalf("renew: %v", err)
	}
	renewed := time.Now() // the renewed lease ends between renewing+5s and renewed+5s
	// Past the first lease's end, well before the renewed one's (renewing+5s, about taking+6s).
	time.Sleep(time.Until(taken.Add(3*time.Second + 500*time.Millisecond)))
	if _, err := b.Lock(ctx, backend.NewLockInfo("apply")); !errors.Is(err, backend.ErrLocked) {
		t.Fatalf("renewed lease (renewed %s after taking it, checked %s after): got %v, want ErrLocked",
			renewing.Sub(taking), time.Since(taking), err)
	}
	time.Sleep(time.Until(renewed.Add(5*time.Second + 500*time.Millisecond))) // past the renewed lease's end
	id2, err := b.Lock(ctx, backend.NewLockInfo("apply"))
	if err != nil {
		t.Fatalf("expired lease: got %v, want it taken over", err)
	}
	if err := a.RenewLock(ctx, id, time.Second); !errors.Is(err, backend.ErrLockID) {
		t.Fatalf("renewing a lost lease: got %v, want ErrLockID", err)
	}
	b.Unlock(ctx, id2)
}

func TestPathWithSpacesWorksAndQueryCharsRefused(t *testing.T) {
	ctx := context.Background()
	b, err := New(ctx, filepath.Join(t.TempDir(), "my lab", "state.db"), "")
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := New(ctx, filepath.Join(t.TempDir(), "a?b.db"), ""); err == nil || !strings.Contains(err.Error(), "may not contain") {
		t.Fatalf("got %v, want a refusal of '?'", err)
	}
}

// A snapshot write that fails (here a trigger aborts the insert, as a full disk or a read-only
// table would) stops the destructive operation before it changes anything: Mutate returns the
// error, never runs the mutation, and the stored serial stays.
func TestFailedSnapshotStopsDestructiveMutation(t *testing.T) {
	ctx := context.Background()
	b := savedOne(t)
	if _, err := b.DB().Exec(`CREATE TRIGGER no_snapshots BEFORE INSERT ON sysbox_state_snapshots BEGIN SELECT RAISE(ABORT, 'injected snapshot write failure'); END`); err != nil {
		t.Fatal(err)
	}
	m := backend.NewManager(b, backend.Options{})
	ran := false
	_, err := m.Mutate(ctx, "destroy", true, func(st *states.State) error {
		ran = true
		st.Resources = nil
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "injected snapshot write failure") {
		t.Fatalf("Mutate with a failing snapshot: got %v, want the snapshot error", err)
	}
	if ran {
		t.Fatal("the destructive mutation ran although its snapshot failed")
	}
	if err := m.Store().Snapshot(ctx, "before destroy"); err == nil {
		t.Fatal("Store.Snapshot with a failing write: got nil, want the error")
	}
	got, err := b.Read(ctx)
	if err != nil || got.Serial != 1 || len(got.Resources) != 1 {
		t.Fatalf("stored state after the refused mutation: got %+v, %v; want serial 1 with its resource", got, err)
	}
}

// savedOne opens a fresh database holding one state (serial 1, resource sysbox_node.web).
func savedOne(t *testing.T) *Backend {
	t.Helper()
	ctx := context.Background()
	b, err := New(ctx, filepath.Join(t.TempDir(), "state.db"), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	st := states.New()
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.web"))
	st.Serial = 1
	if err := b.Save(ctx, st, 0); err != nil {
		t.Fatal(err)
	}
	return b
}
