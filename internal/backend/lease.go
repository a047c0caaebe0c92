package backend

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// leaseKeeper renews a lease-backed lock in the background until stopped, and remembers
// whether the lease was lost (then no further save may go through under it).
type leaseKeeper struct {
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	lost error
}

// keepLease starts renewing lock id every ttl/3.
func keepLease(l Leaser, id string, ttl time.Duration) *leaseKeeper {
	k := &leaseKeeper{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(k.done)
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C:
				ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
				err := l.RenewLock(ctx, id, ttl)
				cancel()
				if err != nil {
					k.mu.Lock()
					k.lost = fmt.Errorf("state lock lease %s lost: %w", id, err)
					k.mu.Unlock()
					return
				}
			}
		}
	}()
	return k
}

// err reports a lost lease.
func (k *leaseKeeper) err() error {
	if k == nil {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lost
}

// halt stops renewing and waits for the renewer to exit.
func (k *leaseKeeper) halt() {
	if k == nil {
		return
	}
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	<-k.done
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
	id, err := LockWait(ctx, l, info, m.opts.LockTimeout)
	if err != nil {
		return "", nil, err
	}
	if !leases {
		return id, nil, nil
	}
	return id, keepLease(lr, id, m.opts.LeaseTTL), nil
}
