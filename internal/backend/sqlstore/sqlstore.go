package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/states"
)

// Dialect is what differs between the databases.
type Dialect struct {
	Kind string // "sqlite", "postgres"
	// Numbered placeholders ($1, $2, ...) instead of "?".
	Numbered bool
	// Blob is the binary column type; AutoID the auto-increment primary key column.
	Blob, AutoID string
	// ForUpdate is appended to the SELECT that starts a CAS transaction.
	ForUpdate string
	// Migrate runs the DDL; it may serialise concurrent migrations its own way.
	Migrate func(ctx context.Context, db *sql.DB, ddl []string) error
}

// Store is a state backend over a SQL database.
type Store struct {
	db       *sql.DB
	d        Dialect
	name     string
	location string

	mu   sync.Mutex
	held map[string]bool
}

var (
	_ backend.Backend       = (*Store)(nil)
	_ backend.Writer        = (*Store)(nil)
	_ backend.Locker        = (*Store)(nil)
	_ backend.ForceUnlocker = (*Store)(nil)
	_ backend.Snapshotter   = (*Store)(nil)
	_ backend.Deleter       = (*Store)(nil)
	_ backend.Leaser        = (*Store)(nil)

	_ backend.SnapshotPruner = (*Store)(nil)
	_ backend.SerialReader   = (*Store)(nil)
)

// New creates the tables if needed and returns the store for the state called name. location
// describes the database for messages and must hold no password. The store owns db.
func New(ctx context.Context, db *sql.DB, d Dialect, name, location string) (*Store, error) {
	if name == "" {
		name = "default"
	}
	s := &Store{db: db, d: d, name: name, location: location, held: map[string]bool{}}
	ddl := []string{
		`CREATE TABLE IF NOT EXISTS sysbox_states (name TEXT PRIMARY KEY, lineage TEXT NOT NULL, serial BIGINT NOT NULL, data ` + d.Blob + ` NOT NULL, updated_at TEXT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS sysbox_state_snapshots (id ` + d.AutoID + `, name TEXT NOT NULL, lineage TEXT NOT NULL, serial BIGINT NOT NULL, reason TEXT NOT NULL, data ` + d.Blob + ` NOT NULL, created_at TEXT NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS sysbox_state_snapshots_name ON sysbox_state_snapshots (name, id)`,
		`CREATE TABLE IF NOT EXISTS sysbox_state_locks (name TEXT PRIMARY KEY, id TEXT NOT NULL, info TEXT NOT NULL, created_at TEXT NOT NULL, expires_at TEXT NOT NULL)`,
	}
	if err := d.Migrate(ctx, db, ddl); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s backend %s: create tables: %w", d.Kind, location, err)
	}
	return s, nil
}

// q rewrites "?" placeholders for the dialect.
func (s *Store) q(query string) string { return s.d.Rebind(query) }

// Rebind rewrites the "?" placeholders of query for the dialect ($1, $2, ... where numbered).
// Queries must not hold a literal "?".
func (d Dialect) Rebind(query string) string {
	if !d.Numbered {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (s *Store) wrap(op string, err error) error {
	return fmt.Errorf("%s backend %s: %s: %w", s.d.Kind, s.location, op, err)
}

// DB is the underlying database (for tests).
func (s *Store) DB() *sql.DB { return s.db }

// Describe implements backend.Backend.
func (s *Store) Describe() backend.Descriptor {
	return backend.Descriptor{Kind: s.d.Kind, Location: s.location,
		Capabilities: backend.Locking | backend.CAS | backend.Snapshot | backend.Deletion | backend.Lease | backend.ForceUnlock}
}

// Close releases the locks this handle still holds and closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	ids := make([]string, 0, len(s.held))
	for id := range s.held {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var errs []error
	for _, id := range ids {
		errs = append(errs, s.Unlock(context.Background(), id))
	}
	errs = append(errs, s.db.Close())
	return errors.Join(errs...)
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// Read implements backend.Reader.
func (s *Store) Read(ctx context.Context) (*states.State, error) {
	var data []byte
	err := s.db.QueryRowContext(ctx, s.q(`SELECT data FROM sysbox_states WHERE name = ?`), s.name).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.wrap("read", err)
	}
	st, err := states.Decode(data)
	if err != nil {
		return nil, s.wrap("read state "+s.name, err)
	}
	return st, nil
}

// Save implements backend.Writer: one transaction reads the stored serial and lineage, and
// replaces the row only where the serial is still the expected one.
func (s *Store) Save(ctx context.Context, st *states.State, expectSerial uint64) error {
	if st.Serial <= expectSerial {
		return s.wrap("save", fmt.Errorf("new serial %d must exceed expected serial %d", st.Serial, expectSerial))
	}
	data, err := states.EncodeContext(ctx, st)
	if err != nil {
		return s.wrap("save", err)
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap("save", err)
	}
	defer tx.Rollback()
	var lineage string
	var serial int64
	err = tx.QueryRowContext(ctx, s.q(`SELECT lineage, serial FROM sysbox_states WHERE name = ?`+s.d.ForUpdate), s.name).Scan(&lineage, &serial)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if expectSerial != 0 {
			return &backend.ConflictError{Backend: s.d.Kind, Expected: expectSerial, Actual: 0}
		}
		res, err := tx.ExecContext(ctx, s.q(`INSERT INTO sysbox_states (name, lineage, serial, data, updated_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`),
			s.name, st.Lineage, int64(st.Serial), data, now())
		if err != nil {
			return s.wrap("save", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return &backend.ConflictError{Backend: s.d.Kind, Expected: 0, Actual: s.storedSerial(ctx)}
		}
	case err != nil:
		return s.wrap("save", err)
	default:
		if uint64(serial) != expectSerial {
			return &backend.ConflictError{Backend: s.d.Kind, Expected: expectSerial, Actual: uint64(serial)}
		}
		if lineage != st.Lineage {
			return &backend.LineageError{Backend: s.d.Kind, Stored: lineage, Offered: st.Lineage}
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE sysbox_states SET serial = ?, data = ?, updated_at = ? WHERE name = ? AND serial = ? AND lineage = ?`),
			int64(st.Serial), data, now(), s.name, int64(expectSerial), st.Lineage)
		if err != nil {
			return s.wrap("save", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return &backend.ConflictError{Backend: s.d.Kind, Expected: expectSerial, Actual: s.storedSerial(ctx)}
		}
	}
	if err := tx.Commit(); err != nil {
		return s.wrap("save: commit", err)
	}
	return nil
}

func (s *Store) storedSerial(ctx context.Context) uint64 {
	var serial int64
	s.db.QueryRowContext(ctx, s.q(`SELECT serial FROM sysbox_states WHERE name = ?`), s.name).Scan(&serial)
	return uint64(serial)
}

// Delete implements backend.Deleter.
func (s *Store) Delete(ctx context.Context, expectSerial uint64) error {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM sysbox_states WHERE name = ? AND serial = ?`), s.name, int64(expectSerial))
	if err != nil {
		return s.wrap("delete", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	var serial int64
	err = s.db.QueryRowContext(ctx, s.q(`SELECT serial FROM sysbox_states WHERE name = ?`), s.name).Scan(&serial)
	if errors.Is(err, sql.ErrNoRows) {
		return backend.ErrNoState
	}
	if err != nil {
		return s.wrap("delete", err)
	}
	return &backend.ConflictError{Backend: s.d.Kind, Expected: expectSerial, Actual: uint64(serial)}
}

// Lock implements backend.Locker. With info.TTL set the lock is a lease: it expires unless
// renewed (RenewLock), and an expired lease is taken over.
func (s *Store) Lock(ctx context.Context, info backend.LockInfo) (string, error) {
	if info.ID == "" {
		info.ID = backend.NewLockID()
	}
	infoJSON, err := json.Marshal(info)
	if err != nil {
		return "", s.wrap("lock", err)
	}
	expires := ""
	if info.TTL > 0 {
		expires = time.Now().Add(info.TTL).UTC().Format(time.RFC3339Nano)
	}
	for range 3 {
		res, err := s.db.ExecContext(ctx, s.q(`INSERT INTO sysbox_state_locks (name, id, info, created_at, expires_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO NOTHING`),
			s.name, info.ID, string(infoJSON), now(), expires)
		if err != nil {
			return "", s.wrap("lock", err)
		}
		if n, _ := res.RowsAffected(); n == 1 {
			s.mu.Lock()
			s.held[info.ID] = true
			s.mu.Unlock()
			return info.ID, nil
		}
		holder, holderExpires, found, err := s.holder(ctx)
		if err != nil {
			return "", err
		}
		if !found {
			continue // released in between; try again
		}
		if holderExpires != "" {
			if t, err := time.Parse(time.RFC3339Nano, holderExpires); err == nil && time.Now().After(t) {
				// An expired lease: remove exactly that lock, then try again.
				if _, err := s.db.ExecContext(ctx, s.q(`DELETE FROM sysbox_state_locks WHERE name = ? AND id = ? AND expires_at = ?`), s.name, holder.ID, holderExpires); err != nil {
					return "", s.wrap("lock: remove expired lease", err)
				}
				continue
			}
			return "", &backend.LockedError{Backend: s.d.Kind, Holder: holder, Detail: "lease expires " + holderExpires}
		}
		return "", &backend.LockedError{Backend: s.d.Kind, Holder: holder}
	}
	return "", s.wrap("lock", errors.New("lock changed hands repeatedly; try again"))
}

func (s *Store) holder(ctx context.Context) (backend.LockInfo, string, bool, error) {
	var id, infoJSON, expires string
	err := s.db.QueryRowContext(ctx, s.q(`SELECT id, info, expires_at FROM sysbox_state_locks WHERE name = ?`), s.name).Scan(&id, &infoJSON, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return backend.LockInfo{}, "", false, nil
	}
	if err != nil {
		return backend.LockInfo{}, "", false, s.wrap("read lock holder", err)
	}
	var info backend.LockInfo
	if err := json.Unmarshal([]byte(infoJSON), &info); err != nil {
		info = backend.LockInfo{}
	}
	info.ID = id
	return info, expires, true, nil
}

func (s *Store) release(ctx context.Context, op, id string) error {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM sysbox_state_locks WHERE name = ? AND id = ?`), s.name, id)
	if err != nil {
		return s.wrap(op, err)
	}
	s.mu.Lock()
	delete(s.held, id)
	s.mu.Unlock()
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	holder, _, found, err := s.holder(ctx)
	if err != nil {
		return err
	}
	if !found {
		return s.wrap(op, fmt.Errorf("lock %s: %w: the state is not locked (was it force-unlocked, or did its lease expire?)", id, backend.ErrLockID))
	}
	return s.wrap(op, fmt.Errorf("lock %s: %w: the state is held by %s", id, backend.ErrLockID, holder))
}

// Unlock implements backend.Locker.
func (s *Store) Unlock(ctx context.Context, id string) error { return s.release(ctx, "unlock", id) }

// ForceUnlock implements backend.ForceUnlocker: it removes the lock with this ID, whoever
// holds it.
func (s *Store) ForceUnlock(ctx context.Context, id string) error {
	return s.release(ctx, "force-unlock", id)
}

// RenewLock implements backend.Leaser.
func (s *Store) RenewLock(ctx context.Context, id string, ttl time.Duration) error {
	res, err := s.db.ExecContext(ctx, s.q(`UPDATE sysbox_state_locks SET expires_at = ? WHERE name = ? AND id = ?`),
		time.Now().Add(ttl).UTC().Format(time.RFC3339Nano), s.name, id)
	if err != nil {
		return s.wrap("renew lock", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return s.wrap("renew lock", fmt.Errorf("lock %s: %w: lost (expired and taken over, or force-unlocked)", id, backend.ErrLockID))
	}
	return nil
}

// Snapshot implements backend.Snapshotter.
func (s *Store) Snapshot(ctx context.Context, reason string) (backend.SnapshotInfo, error) {
	created := time.Now().UTC()
	var id int64
	var lineage string
	var serial int64
	err := s.db.QueryRowContext(ctx, s.q(`INSERT INTO sysbox_state_snapshots (name, lineage, serial, reason, data, created_at)
		SELECT name, lineage, serial, ?, data, ? FROM sysbox_states WHERE name = ? RETURNING id, lineage, serial`),
		reason, created.Format(time.RFC3339Nano), s.name).Scan(&id, &lineage, &serial)
	if errors.Is(err, sql.ErrNoRows) {
		return backend.SnapshotInfo{}, backend.ErrNoState
	}
	if err != nil {
		return backend.SnapshotInfo{}, s.wrap("snapshot", err)
	}
	return backend.SnapshotInfo{ID: strconv.FormatInt(id, 10), Lineage: lineage, Serial: uint64(serial), Reason: reason, Created: created}, nil
}

// Snapshots implements backend.Snapshotter.
func (s *Store) Snapshots(ctx context.Context) ([]backend.SnapshotInfo, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id, lineage, serial, reason, created_at FROM sysbox_state_snapshots WHERE name = ? ORDER BY id`), s.name)
	if err != nil {
		return nil, s.wrap("snapshots", err)
	}
	defer rows.Close()
	var out []backend.SnapshotInfo
	for rows.Next() {
		var id, serial int64
		var info backend.SnapshotInfo
		var created string
		if err := rows.Scan(&id, &info.Lineage, &serial, &info.Reason, &created); err != nil {
			return nil, s.wrap("snapshots", err)
		}
		info.ID, info.Serial = strconv.FormatInt(id, 10), uint64(serial)
		info.Created, _ = time.Parse(time.RFC3339Nano, created)
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("snapshots", err)
	}
	return out, nil
}

// ReadSnapshot implements backend.Snapshotter.
func (s *Store) ReadSnapshot(ctx context.Context, id string) (*states.State, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return nil, s.wrap("snapshot "+id, errors.New("not a snapshot ID"))
	}
	var data []byte
	err = s.db.QueryRowContext(ctx, s.q(`SELECT data FROM sysbox_state_snapshots WHERE name = ? AND id = ?`), s.name, n).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, s.wrap("snapshot "+id, errors.New("no such snapshot"))
	}
	if err != nil {
		return nil, s.wrap("snapshot "+id, err)
	}
	st, err := states.Decode(data)
	if err != nil {
		return nil, s.wrap("snapshot "+id, err)
	}
	return st, nil
}

// PruneSnapshots implements backend.SnapshotPruner.
func (s *Store) PruneSnapshots(ctx context.Context, keep int) (int, error) {
	res, err := s.db.ExecContext(ctx, s.q(`DELETE FROM sysbox_state_snapshots WHERE name = ? AND id NOT IN
		(SELECT id FROM sysbox_state_snapshots WHERE name = ? ORDER BY id DESC LIMIT ?)`), s.name, s.name, keep)
	if err != nil {
		return 0, s.wrap("prune snapshots", err)
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// StoredSerial implements backend.SerialReader from the row's columns; a document of an
// unknown format version is refused.
func (s *Store) StoredSerial(ctx context.Context) (uint64, string, bool, error) {
	var serial int64
	var lineage string
	var data []byte
	err := s.db.QueryRowContext(ctx, s.q(`SELECT serial, lineage, data FROM sysbox_states WHERE name = ?`), s.name).Scan(&serial, &lineage, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, "", false, nil
	}
	if err != nil {
		return 0, "", false, s.wrap("stored serial", err)
	}
	var uv *states.UnsupportedVersionError
	if _, err := states.ReadHeader(bytes.NewReader(data)); errors.As(err, &uv) {
		return 0, "", false, s.wrap("stored serial", err)
	}
	return uint64(serial), lineage, true, nil
}
