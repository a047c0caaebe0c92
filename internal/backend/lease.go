package backend

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// leaseKeeper renews a lease-backed lock in the background until halted, and says whether the
// lease still holds (no save may go through under a lost one).
//
// The lease is valid until validUntil: TTL after the start of the last call that took or
// renewed it (the backend sets the expiry during the call, so never earlier). A renewal that
// fails without a refusal (a timeout, a dropped connection, a busy database) is retried until
// then: the lease is lost when it really expires, or at once when the backend refuses the
// renewal (ErrLockID: force-unlocked, or expired and taken by another holder).
type leaseKeeper struct {
	id     string
	ttl    time.Duration
	now    func() time.Time
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	validUntil time.Time
	lastErr    error // the last failed renewal since the last success
	lost       error
}

// keepLease starts renewing lock id, taken by a call that started at took, every ttl/3.
func keepLease(l Leaser, id string, ttl time.Duration, took time.Time, now func() time.Time) *leaseKeeper {
	ctx, cancel := context.WithCancel(context.Background())
	k := &leaseKeeper{id: id, ttl: ttl, now: now, cancel: cancel, done: make(chan struct{}), validUntil: took.Add(ttl)}
	go k.run(ctx, l)
	return k
}

func (k *leaseKeeper) run(ctx context.Context, l Leaser) {
	defer close(k.done)
	wait := k.ttl / 3
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		start := k.now()
		k.mu.Lock()
		left := k.validUntil.Sub(start)
		k.mu.Unlock()
		err := errExpired
		if left > 0 {
			// A renewal that ends after the lease expired is of no use: it may take until then.
			rctx, cancel := context.WithTimeout(ctx, left)
			err = l.RenewLock(rctx, k.id, k.ttl)
			cancel()
		}
		if ctx.Err() != nil {
			return // halted
		}
		if k.settle(start, err) {
			return
		}
		wait = k.ttl / 3
		if err != nil {
			wait = k.ttl / 10 // retry well before the lease expires
		}
	}
}

// errExpired stands for a renewal not tried because the lease had already expired.
var errExpired = errors.New("no renewal tried: the lease had expired")

// settle records the outcome of a renewal started at start; true when the lease is lost.
func (k *leaseKeeper) settle(start time.Time, err error) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err == nil:
		k.validUntil, k.lastErr = start.Add(k.ttl), nil
		return false
	case errors.Is(err, ErrLockID):
		k.lost = fmt.Errorf("state lock lease %s lost: %w", k.id, err)
		return true
	}
	k.lastErr = err
	if k.now().Before(k.validUntil) {
		return false // still valid: retry
	}
	k.lost = k.expiredLocked()
	return true
}

// expiredLocked is the error for a lease that ran out without a successful renewal. k.mu held.
func (k *leaseKeeper) expiredLocked() error {
	return fmt.Errorf("state lock lease %s lost: %w: it expired at %s without a successful renewal (last renewal error: %v)",
		k.id, ErrLockID, k.validUntil.UTC().Format(time.RFC3339Nano), k.lastErr)
}

// err reports a lost lease: refused by the backend, or expired by the keeper's clock (also
// while a renewal is still under way).
func (k *leaseKeeper) err() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lost != nil {
		return k.lost
	}
	if !k.now().Before(k.validUntil) {
		return k.expiredLocked()
	}
	return nil
}

// halt stops renewing (abandoning a renewal under way) and waits for the renewer to exit.
func (k *leaseKeeper) halt() {
	if k == nil {
		return
	}
	k.cancel()
	<-k.done
}

// timedLocker notes when its last Lock call started: a lease taken by that call lasts at least
// TTL from then.
type timedLocker struct {
	Locker
	now  func() time.Time
	last time.Time
}

func (t *timedLocker) Lock(ctx context.Context, info LockInfo) (string, error) {
	t.last = t.now()
	return t.Locker.Lock(ctx, info)
}

// lockFor takes the state lock for operation (waiting up to LockTimeout) and, when LeaseTTL is
// set and the backend declares leases, renews it in the background.
func (m *Manager) lockFor(ctx context.Context, l Locker, operation string) (string, *leaseKeeper, error) {
	info := NewLockInfo(operation)
	lr, leases := m.b.(Leaser)
	leases = leases && m.opts.LeaseTTL > 0 && m.b.Describe().Capabilities.Has(Lease)
	if leases {
		info.TTL = m.opts.LeaseTTL
	}
	tl := &timedLocker{Locker: l, now: m.opts.Now}
	id, err := LockWait(ctx, tl, info, m.opts.LockTimeout)
	if err != nil {
		return "", nil, err
	}
	if !leases {
		return id, nil, nil
	}
	return id, keepLease(lr, id, m.opts.LeaseTTL, tl.last, m.opts.Now), nil
}
