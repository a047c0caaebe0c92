package backend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"
	"zyvor.dev/sysbox/internal/feature"

	"zyvor.dev/sysbox/internal/states"
)

// Capability is one guarantee a backend may declare. Capabilities combine as a bit set.
type Capability uint16

// The capabilities of S13.
const (
	// Locking: an exclusive lock a writer holds for the whole operation (Locker).
	Locking Capability = 1 << iota
	// CAS: Save compares the stored serial before replacing the state (Writer).
	CAS
	// Snapshot: the prior state can be kept before a destructive operation (Snapshotter).
	Snapshot
	// Deletion: the stored state can be deleted (Deleter).
	Deletion
	// Lease: locks expire unless renewed, so a crashed holder does not block forever (Leaser).
	Lease
	// ForceUnlock: an operator can remove another holder's lock by its ID (ForceUnlocker).
	ForceUnlock
)

var capNames = []struct {
	c    Capability
	name string
}{
	{Locking, "locking"}, {CAS, "compare-and-swap"}, {Snapshot, "snapshot"},
	{Deletion, "deletion"}, {Lease, "lease"}, {ForceUnlock, "force-unlock"},
}

// Has reports whether every capability in want is in c.
func (c Capability) Has(want Capability) bool { return c&want == want }

// List names each capability in c, in declaration order.
func (c Capability) List() []string {
	var out []string
	for _, n := range capNames {
		if c&n.c != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// String joins List with ", " ("none" when empty).
func (c Capability) String() string {
	if c == 0 {
		return "none"
	}
	return strings.Join(c.List(), ", ")
}

// MutationCapabilities are what the Manager requires before any mutation.
const MutationCapabilities = Locking | CAS

// Descriptor says what a backend is and what it guarantees.
type Descriptor struct {
	Kind         string // "local", "sqlite", "postgres", "http"
	Location     string // a path, a database and state name, a URL (never a password)
	Capabilities Capability
}

// Backend is what every backend is: it describes itself, reads, and can be closed.
type Backend interface {
	Describe() Descriptor
	Reader
	Close() error
}

// Reader reads the stored state: nil (and no error) when nothing is stored yet. A stored
// state that is corrupt, of an unknown version or lacking required ownership is an error (see
// states.Decode).
type Reader interface {
	Read(ctx context.Context) (*states.State, error)
}

// Writer replaces the stored state by compare-and-swap: st is stored only if the stored
// serial equals expectSerial (0 when nothing is stored) and the lineage matches; otherwise a
// *ConflictError or *LineageError. st.Serial must be greater than expectSerial. A backend
// without the CAS capability ignores expectSerial (unsafe; the Manager refuses it by default).
type Writer interface {
	Save(ctx context.Context, st *states.State, expectSerial uint64) error
}

// Locker takes and releases the state lock. Lock never waits: a held lock is a *LockedError
// naming the holder (use LockWait to wait). Lock returns the lock's ID, which Unlock and
// ForceUnlock take.
type Locker interface {
	Lock(ctx context.Context, info LockInfo) (string, error)
	Unlock(ctx context.Context, id string) error
}

// ForceUnlocker removes a lock by its ID whoever holds it (the operator's last resort after a
// holder crashed). A mismatching ID is an error naming the current holder.
type ForceUnlocker interface {
	ForceUnlock(ctx context.Context, id string) error
}

// Snapshotter keeps copies of the stored state.
type Snapshotter interface {
	// Snapshot copies the stored state, recording reason. Nothing stored: ErrNoState.
	Snapshot(ctx context.Context, reason string) (SnapshotInfo, error)
	// Snapshots lists the copies, oldest first.
	Snapshots(ctx context.Context) ([]SnapshotInfo, error)
	// ReadSnapshot returns one copy (decoded and checked like Read).
	ReadSnapshot(ctx context.Context, id string) (*states.State, error)
}

// SerialReader reports the stored state's serial and lineage from its header alone, even when
// the rest of the document is damaged (so a snapshot can be restored over it by CAS). A stored
// document of an unknown format version is an error: it is never overwritten.
type SerialReader interface {
	StoredSerial(ctx context.Context) (serial uint64, lineage string, exists bool, err error)
}

// SnapshotPruner removes all but the newest keep snapshots.
type SnapshotPruner interface {
	PruneSnapshots(ctx context.Context, keep int) (removed int, err error)
}

// Deleter deletes the stored state by compare-and-swap on the serial. Snapshots stay.
type Deleter interface {
	Delete(ctx context.Context, expectSerial uint64) error
}

// Leaser renews a lock taken with LockInfo.TTL before it expires.
type Leaser interface {
	RenewLock(ctx context.Context, id string, ttl time.Duration) error
}

// SnapshotInfo describes one snapshot.
type SnapshotInfo struct {
	ID      string    `json:"id"`
	Lineage string    `json:"lineage"`
	Serial  uint64    `json:"serial"`
	Reason  string    `json:"reason"`
	Created time.Time `json:"created"`
}

// LockInfo records who holds a lock; it is what a second writer is told.
type LockInfo struct {
	ID        string    `json:"id"`
	Operation string    `json:"operation"` // "apply", "state mv", ...
	Who       string    `json:"who"`       // user@host
	PID       int       `json:"pid"`
	Version   string    `json:"version"` // the holder's sysbox version
	Created   time.Time `json:"created"`
	// TTL, when non-zero and the backend declares Lease, bounds how long the lock lasts
	// without RenewLock.
	TTL time.Duration `json:"ttl,omitempty"`
}

// NewLockInfo describes the calling process about to run operation.
func NewLockInfo(operation string) LockInfo {
	who := "unknown"
	if u, err := user.Current(); err == nil {
		who = u.Username
	}
	if h, err := os.Hostname(); err == nil {
		who += "@" + h
	}
	return LockInfo{Operation: operation, Who: who, PID: os.Getpid(), Version: states.ToolVersion(), Created: time.Now().UTC()}
}

// String renders the holder for an error message.
func (i LockInfo) String() string {
	return fmt.Sprintf("lock %s held by %s (pid %d, sysbox %s) for %q since %s",
		i.ID, i.Who, i.PID, i.Version, i.Operation, i.Created.UTC().Format(time.RFC3339))
}

// NewLockID returns a fresh random lock ID.
func NewLockID() string { return states.NewLineage() }

// Errors callers branch on.
var (
	// ErrLocked is wrapped by *LockedError.
	ErrLocked = errors.New("state is locked")
	// ErrConflict is wrapped by *ConflictError and *LineageError.
	ErrConflict = errors.New("state changed concurrently")
	// ErrNoState is returned by operations that need a stored state when there is none.
	ErrNoState = errors.New("no state stored")
	// ErrUnsafe is wrapped by *UnsafeBackendError.
	ErrUnsafe = errors.New("backend is not safe for mutation")
	// ErrNotSupported is wrapped by *UnsupportedError: the module's one "not supported here"
	// error (feature.ErrNotSupported).
	ErrNotSupported = feature.ErrNotSupported
	// ErrLockID is returned when a lock ID does not match the lock held.
	ErrLockID = errors.New("lock ID does not match the held lock")
)

// LockedError says another writer holds the lock, and who.
type LockedError struct {
	Backend string
	Holder  LockInfo
	// Detail is what the backend knows when Holder is incomplete (e.g. a bare pid).
	Detail string
}

func (e *LockedError) Error() string {
	msg := fmt.Sprintf("%s backend: %v: ", e.Backend, ErrLocked)
	if e.Holder.ID != "" {
		msg += e.Holder.String()
	} else {
		msg += "holder unknown"
	}
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// ConflictError says the stored serial is not the one the writer read: someone else saved in
// between. Nothing was stored; re-read and retry.
type ConflictError struct {
	Backend  string
	Expected uint64 // the serial the writer read
	Actual   uint64 // the serial stored now (0: nothing stored)
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s backend: %v: expected serial %d, stored serial is %d; nothing was saved (re-read the state and retry)",
		e.Backend, ErrConflict, e.Expected, e.Actual)
}

func (e *ConflictError) Unwrap() error { return ErrConflict }

// LineageError says the stored state is a different state altogether.
type LineageError struct {
	Backend         string
	Stored, Offered string
}

func (e *LineageError) Error() string {
	return fmt.Sprintf("%s backend: stored state has lineage %s, refusing to overwrite it with lineage %s: these are different topologies; nothing was saved",
		e.Backend, e.Stored, e.Offered)
}

func (e *LineageError) Unwrap() error { return ErrConflict }

// UnsafeBackendError refuses a mutation through a backend lacking locking and/or CAS.
type UnsafeBackendError struct {
	Backend string
	Missing Capability
}

func (e *UnsafeBackendError) Error() string {
	return fmt.Sprintf("%s backend lacks %s: refusing to change state (pass --allow-unsafe-state only if you guarantee that nothing else writes this state)",
		e.Backend, e.Missing)
}

func (e *UnsafeBackendError) Unwrap() error { return ErrUnsafe }

// UnsupportedError says a backend does not declare a capability an operation needs.
type UnsupportedError struct {
	Backend    string
	Capability Capability
	Hint       string
}

func (e *UnsupportedError) Error() string {
	msg := fmt.Sprintf("%s backend does not support %s", e.Backend, e.Capability)
	if e.Hint != "" {
		msg += ": " + e.Hint
	}
	return msg
}

func (e *UnsupportedError) Unwrap() error { return ErrNotSupported }

// LockWait calls l.Lock until it succeeds, timeout passes (the last *LockedError is returned,
// wrapped with how long it waited) or ctx ends. timeout 0 tries once.
func LockWait(ctx context.Context, l Locker, info LockInfo, timeout time.Duration) (string, error) {
	if info.ID == "" {
		info.ID = NewLockID()
	}
	deadline := time.Now().Add(timeout)
	delay := 20 * time.Millisecond
	for {
		id, err := l.Lock(ctx, info)
		if err == nil || !errors.Is(err, ErrLocked) {
			return id, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			if timeout > 0 {
				return "", fmt.Errorf("gave up after waiting %s: %w", timeout, err)
			}
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%w (while waiting: %v)", err, ctx.Err())
		case <-time.After(min(delay, left)):
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}
