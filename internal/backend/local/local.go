package local

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/states"
)

// Backend is a state file on the local filesystem.
type Backend struct {
	path string

	mu    sync.Mutex
	locks map[string]*durable.FileLock
}

var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.Writer      = (*Backend)(nil)
	_ backend.Locker      = (*Backend)(nil)
	_ backend.Snapshotter = (*Backend)(nil)
	_ backend.Deleter     = (*Backend)(nil)

	_ backend.SnapshotPruner = (*Backend)(nil)
	_ backend.SerialReader   = (*Backend)(nil)
)

// DefaultPath is the state file used when no path is configured.
const DefaultPath = "sysbox.sbxstate"

// New returns the backend for the state file at path. Its directory is created by the first
// write (lock or save), so that reading a topology that was never applied leaves no trace.
func New(path string) (*Backend, error) {
	if path == "" {
		path = DefaultPath
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("local backend %s: %w", path, err)
	}
	return &Backend{path: abs, locks: map[string]*durable.FileLock{}}, nil
}

// Open builds a backend from settings: "path".
func Open(settings map[string]string) (*Backend, error) {
	for k := range settings {
		if k != "path" {
			return nil, fmt.Errorf("local backend: unknown setting %q (known: path)", k)
		}
	}
	return New(settings["path"])
}

// Path is the state file's absolute path.
func (b *Backend) Path() string { return b.path }

// Describe implements backend.Backend.
func (b *Backend) Describe() backend.Descriptor {
	return backend.Descriptor{Kind: "local", Location: b.path,
		Capabilities: backend.Locking | backend.CAS | backend.Snapshot | backend.Deletion}
}

// Close releases any lock this process still holds.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for id, l := range b.locks {
		errs = append(errs, l.Unlock())
		delete(b.locks, id)
	}
	return errors.Join(errs...)
}

// Read implements backend.Reader.
func (b *Backend) Read(ctx context.Context) (*states.State, error) {
	data, ok, err := durable.ReadFileIfExists(b.path)
	if err != nil {
		return nil, fmt.Errorf("local backend: %w", err)
	}
	if !ok {
		return nil, nil
	}
	st, err := states.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("local backend: %s: %w", b.path, err)
	}
	return st, nil
}

// current reads the stored header: ok false when nothing is stored.
func (b *Backend) current() (states.Header, bool, error) {
	f, err := os.Open(b.path)
	if errors.Is(err, os.ErrNotExist) {
		// A dangling symlink is not "no state": a first save would pass the CAS at serial 0.
		if err := durable.Absent(b.path); err != nil {
			return states.Header{}, false, fmt.Errorf("local backend: %w", err)
		}
		return states.Header{}, false, nil
	}
	if err != nil {
		return states.Header{}, false, fmt.Errorf("local backend: %w", err)
	}
	defer f.Close()
	h, err := states.ReadHeader(f)
	if err != nil {
		return h, false, fmt.Errorf("local backend: %s: %w", b.path, err)
	}
	return h, true, nil
}

// mkdir creates the state file's directory, as the first write needs it.
func (b *Backend) mkdir() error {
	if err := durable.MkdirAll(filepath.Dir(b.path), 0o700); err != nil {
		return fmt.Errorf("local backend %s: %w", b.path, err)
	}
	return nil
}

func (b *Backend) casLock(ctx context.Context) (*durable.FileLock, error) {
	if err := b.mkdir(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := durable.LockWait(ctx, b.path+".cas.lock")
	if err != nil {
		return nil, fmt.Errorf("local backend: serialise writers: %w", err)
	}
	return l, nil
}

// Save implements backend.Writer: compare-and-swap on the serial under P.cas.lock, then an
// atomic replace of P.
func (b *Backend) Save(ctx context.Context, st *states.State, expectSerial uint64) error {
	if st.Serial <= expectSerial {
		return fmt.Errorf("local backend: new serial %d must exceed expected serial %d", st.Serial, expectSerial)
	}
	l, err := b.casLock(ctx)
	if err != nil {
		return err
	}
	defer l.Unlock()
	h, ok, err := b.current()
	if err != nil {
		return err
	}
	if !ok && expectSerial != 0 || ok && h.Serial != expectSerial {
		return &backend.ConflictError{Backend: "local", Expected: expectSerial, Actual: h.Serial}
	}
	if ok && h.Lineage != st.Lineage {
		return &backend.LineageError{Backend: "local", Stored: h.Lineage, Offered: st.Lineage}
	}
	// Stream the document into the temporary file (no second copy of a large state in memory).
	if err := durable.WriteFileFunc(b.path, 0o600, func(w io.Writer) error { return states.EncodeToContext(ctx, w, st) }); err != nil {
		return fmt.Errorf("local backend: %w", err)
	}
	return nil
}

// Delete implements backend.Deleter. Snapshots stay.
func (b *Backend) Delete(ctx context.Context, expectSerial uint64) error {
	l, err := b.casLock(ctx)
	if err != nil {
		return err
	}
	defer l.Unlock()
	h, ok, err := b.current()
	if err != nil {
		return err
	}
	if !ok {
		return backend.ErrNoState
	}
	if h.Serial != expectSerial {
		return &backend.ConflictError{Backend: "local", Expected: expectSerial, Actual: h.Serial}
	}
	if err := os.Remove(b.path); err != nil {
		return fmt.Errorf("local backend: %w", err)
	}
	return durable.SyncDir(filepath.Dir(b.path))
}

// Lock implements backend.Locker: a non-blocking flock on P.lock, then the holder's
// LockInfo in P.lock.json.
func (b *Backend) Lock(ctx context.Context, info backend.LockInfo) (string, error) {
	if info.ID == "" {
		info.ID = backend.NewLockID()
	}
	if err := b.mkdir(); err != nil {
		return "", err
	}
	fl, err := durable.Lock(b.path + ".lock")
	if err != nil {
		var le *durable.LockedError
		if errors.As(err, &le) {
			return "", b.lockedError(le.Holder)
		}
		return "", fmt.Errorf("local backend: %w", err)
	}
	data, _ := json.Marshal(info)
	if err := durable.WriteFile(b.path+".lock.json", data, 0o600); err != nil {
		fl.Unlock()
		return "", fmt.Errorf("local backend: record lock holder: %w", err)
	}
	b.mu.Lock()
	b.locks[info.ID] = fl
	b.mu.Unlock()
	return info.ID, nil
}

// lockedError describes the holder from P.lock.json, trusting it only when its pid matches the
// pid the flock holder recorded in P.lock (else it is a previous holder's leftover).
func (b *Backend) lockedError(flockHolder string) error {
	e := &backend.LockedError{Backend: "local", Detail: flockHolder}
	var info backend.LockInfo
	data, err := os.ReadFile(b.path + ".lock.json")
	if err == nil && json.Unmarshal(data, &info) == nil {
		if pid, ok := durable.HolderPID(flockHolder); ok && pid == info.PID {
			e.Holder = info
		}
	}
	return e
}

// Unlock implements backend.Locker. Only the process holding the lock can release it.
func (b *Backend) Unlock(ctx context.Context, id string) error {
	b.mu.Lock()
	fl, ok := b.locks[id]
	delete(b.locks, id)
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("local backend: unlock %s: %w (this process does not hold it)", id, backend.ErrLockID)
	}
	// Clear the holder record while still holding the flock, so nobody reads a stale one.
	_ = durable.WriteFile(b.path+".lock.json", nil, 0o600)
	return fl.Unlock()
}

// snapshot file names: s<serial>-<UTC time>-<reason>.json
var snapName = regexp.MustCompile(`^s(\d+)-(\d{8}T\d{6}\.\d{9}Z)-([a-z0-9-]*)\.json$`)

const snapTime = "20060102T150405.000000000Z"

func (b *Backend) snapDir() string { return b.path + ".snapshots" }

// Snapshot implements backend.Snapshotter: a durable copy of P in P.snapshots/.
func (b *Backend) Snapshot(ctx context.Context, reason string) (backend.SnapshotInfo, error) {
	l, err := b.casLock(ctx)
	if err != nil {
		return backend.SnapshotInfo{}, err
	}
	defer l.Unlock()
	data, ok, err := durable.ReadFileIfExists(b.path)
	if err != nil {
		return backend.SnapshotInfo{}, fmt.Errorf("local backend: snapshot: %w", err)
	}
	if !ok {
		return backend.SnapshotInfo{}, backend.ErrNoState
	}
	h, err := states.ReadHeader(bytes.NewReader(data))
	if err != nil {
		return backend.SnapshotInfo{}, fmt.Errorf("local backend: snapshot: %w", err)
	}
	if err := durable.MkdirAll(b.snapDir(), 0o700); err != nil {
		return backend.SnapshotInfo{}, fmt.Errorf("local backend: snapshot: %w", err)
	}
	now := time.Now().UTC()
	id := fmt.Sprintf("s%d-%s-%s", h.Serial, now.Format(snapTime), slug(reason))
	if err := durable.WriteFile(filepath.Join(b.snapDir(), id+".json"), data, 0o600); err != nil {
		return backend.SnapshotInfo{}, fmt.Errorf("local backend: snapshot: %w", err)
	}
	return backend.SnapshotInfo{ID: id, Lineage: h.Lineage, Serial: h.Serial, Reason: slug(reason), Created: now}, nil
}

func slug(s string) string {
	var sb strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			sb.WriteRune(r)
			dash = false
		} else if !dash && sb.Len() > 0 {
			sb.WriteByte('-')
			dash = true
		}
		if sb.Len() >= 40 {
			break
		}
	}
	return strings.TrimSuffix(sb.String(), "-")
}

// Snapshots implements backend.Snapshotter.
func (b *Backend) Snapshots(ctx context.Context) ([]backend.SnapshotInfo, error) {
	ents, err := os.ReadDir(b.snapDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local backend: snapshots: %w", err)
	}
	var out []backend.SnapshotInfo
	for _, e := range ents {
		m := snapName.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		serial, _ := strconv.ParseUint(m[1], 10, 64)
		at, _ := time.Parse(snapTime, m[2])
		info := backend.SnapshotInfo{ID: strings.TrimSuffix(e.Name(), ".json"), Serial: serial, Reason: m[3], Created: at}
		if f, err := os.Open(filepath.Join(b.snapDir(), e.Name())); err == nil {
			if h, err := states.ReadHeader(f); err == nil {
				info.Lineage = h.Lineage
			}
			f.Close()
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b backend.SnapshotInfo) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// ReadSnapshot implements backend.Snapshotter.
func (b *Backend) ReadSnapshot(ctx context.Context, id string) (*states.State, error) {
	if !snapName.MatchString(id + ".json") {
		return nil, fmt.Errorf("local backend: snapshot %q: not a snapshot ID", id)
	}
	p := filepath.Join(b.snapDir(), id+".json")
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("local backend: snapshot %s: %w", id, err)
	}
	st, err := states.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("local backend: snapshot %s: %w", p, err)
	}
	return st, nil
}

// PruneSnapshots implements backend.SnapshotPruner.
func (b *Backend) PruneSnapshots(ctx context.Context, keep int) (int, error) {
	list, err := b.Snapshots(ctx)
	if err != nil {
		return 0, err
	}
	removed := 0
	for i := 0; i < len(list)-keep; i++ {
		if err := os.Remove(filepath.Join(b.snapDir(), list[i].ID+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
			return removed, fmt.Errorf("local backend: prune snapshot %s: %w", list[i].ID, err)
		}
		removed++
	}
	if removed > 0 {
		if err := durable.SyncDir(b.snapDir()); err != nil {
			return removed, fmt.Errorf("local backend: prune snapshots: %w", err)
		}
	}
	return removed, nil
}

// StoredSerial implements backend.SerialReader from the document's header.
func (b *Backend) StoredSerial(ctx context.Context) (uint64, string, bool, error) {
	h, ok, err := b.current()
	return h.Serial, h.Lineage, ok, err
}
