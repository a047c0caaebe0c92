package backend_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/states"
)

// leaseBackend is an in-memory backend with leases whose renewals the test scripts: the n-th
// RenewLock call (from 1) returns renew(ctx, n).
type leaseBackend struct {
	renew func(ctx context.Context, n int) error
	mu    sync.Mutex
	calls int
}

var (
	_ backend.Backend = (*leaseBackend)(nil)
	_ backend.Locker  = (*leaseBackend)(nil)
	_ backend.Writer  = (*leaseBackend)(nil)
	_ backend.Leaser  = (*leaseBackend)(nil)
)

func (b *leaseBackend) Describe() backend.Descriptor {
	return backend.Descriptor{Kind: "test", Location: "memory", Capabilities: backend.Locking | backend.CAS | backend.Lease}
}
func (b *leaseBackend) Read(context.Context) (*states.State, error)                { return nil, nil }
func (b *leaseBackend) Close() error                                               { return nil }
func (b *leaseBackend) Lock(_ context.Context, i backend.LockInfo) (string, error) { return i.ID, nil }
func (b *leaseBackend) Unlock(context.Context, string) error                       { return nil }
func (b *leaseBackend) Save(context.Context, *states.State, uint64) error          { return nil }

func (b *leaseBackend) RenewLock(ctx context.Context, _ string, _ time.Duration) error {
	b.mu.Lock()
	b.calls++
	n := b.calls
	b.mu.Unlock()
	return b.renew(ctx, n)
}

func (b *leaseBackend) renewals() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls
}

// fakeClock is the Manager's clock (Options.Now): lease expiry is judged by it, so a loaded
// host's delays never expire a lease in these tests; only the test moves it.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Set(t time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.t = t }

// The renewer waits TTL/3 (then TTL/10 between retries) in real time; 300 ms keeps the tests short.
const leaseTTL = 300 * time.Millisecond

var leaseT0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// hang blocks a renewal until the renewer gives up on it (its deadline is the lease's expiry)
// or halts.
func hang(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }

func beginLeased(t *testing.T, b *leaseBackend, clk *fakeClock) *backend.Txn {
	t.Helper()
	tx, err := backend.NewManager(b, backend.Options{LeaseTTL: leaseTTL, Now: clk.Now}).Begin(context.Background(), "apply")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close(context.Background()) })
	return tx
}

// waitFor waits (real time, generous for a loaded host) until ch is closed.
func waitFor(t *testing.T, ch <-chan struct{}, what string, b *leaseBackend, tx *backend.Txn) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not come in 30 s (%d renewal calls; save now: %v)", what, b.renewals(), tx.Save(context.Background(), tx.State()))
	}
}

// TestLeaseKeptThroughFailedRenewalsUntilItExpires: a renewal slower than its turn or failing
// with a transient error does not lose the lease; the renewer retries while the lease is
// valid, and a later success extends it. The old renewer gave the lease up at the first failure.
func TestLeaseKeptThroughFailedRenewalsUntilItExpires(t *testing.T) {
	clk := &fakeClock{t: leaseT0}
	fourth := make(chan struct{})
	b := &leaseBackend{renew: func(ctx context.Context, n int) error {
		switch n {
		case 1:
			return fmt.Errorf("renew lock: %w", context.DeadlineExceeded) // slower than TTL/3
		case 2:
			clk.Set(leaseT0.Add(leaseTTL - time.Millisecond)) // 1 ms before the lease would expire
			return errors.New("renew lock: database is locked")
		case 3:
			return nil // renewed at T0+TTL-1ms: valid until T0+2TTL-1ms
		case 4:
			close(fourth)
		}
		return hang(ctx)
	}}
	tx := beginLeased(t, b, clk)
	waitFor(t, fourth, "the renewal after a success", b, tx)

	clk.Set(leaseT0.Add(leaseTTL + leaseTTL/2)) // past the first expiry, before the renewed one
	if err := tx.Save(context.Background(), tx.State()); err != nil {
		t.Fatalf("save within the renewed lease (two renewals had failed): %v", err)
	}
	// Every later renewal hangs: at the renewed expiry the lease is lost, even though the
	// renewal under way has not returned.
	clk.Set(leaseT0.Add(2*leaseTTL - time.Millisecond))
	err := tx.Save(context.Background(), tx.State())
	if !errors.Is(err, backend.ErrLockID) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("save once the renewed lease expired: got %v, want an expired-lease error (ErrLockID)", err)
	}
}

// TestLeaseLostAtOnceWhenRenewalIsRefused: a refusal (the lock is held by another, or was
// force-unlocked) loses the lease although its time is not up, and renewing stops.
func TestLeaseLostAtOnceWhenRenewalIsRefused(t *testing.T) {
	clk := &fakeClock{t: leaseT0} // never moves: only the refusal can lose the lease
	b := &leaseBackend{renew: func(ctx context.Context, n int) error {
		if n == 1 {
			return fmt.Errorf("lock x: %w: the state is held by someone else", backend.ErrLockID)
		}
		return hang(ctx)
	}}
	tx := beginLeased(t, b, clk)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		err := tx.Save(context.Background(), tx.State())
		if err != nil {
			if !errors.Is(err, backend.ErrLockID) || !strings.Contains(err.Error(), "held by someone else") {
				t.Fatalf("save after a refused renewal: got %v, want the refusal (ErrLockID)", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("save 30 s after a refused renewal still succeeds (%d renewal calls)", b.renewals())
		}
	}
	tx.Close(context.Background()) // halts the renewer: no call can come after this
	if n := b.renewals(); n != 1 {
		t.Errorf("%d renewal calls, want 1: renewing goes on after a refusal", n)
	}
}

// TestLeaseLostWhenItExpiresDuringARenewal: a save after the lease's expiry is refused while a
// renewal is still under way; the lease never outlives its TTL by waiting on the backend.
func TestLeaseLostWhenItExpiresDuringARenewal(t *testing.T) {
	clk := &fakeClock{t: leaseT0}
	first := make(chan struct{})
	b := &leaseBackend{renew: func(ctx context.Context, n int) error {
		if n == 1 {
			close(first)
		}
		return hang(ctx)
	}}
	tx := beginLeased(t, b, clk)
	if err := tx.Save(context.Background(), tx.State()); err != nil {
		t.Fatalf("save within the lease: %v", err)
	}
	waitFor(t, first, "the first renewal", b, tx)
	clk.Set(leaseT0.Add(leaseTTL))
	err := tx.Save(context.Background(), tx.State())
	if !errors.Is(err, backend.ErrLockID) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("save at the lease's expiry: got %v, want an expired-lease error (ErrLockID)", err)
	}
}
