package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"zyvor.dev/sysbox/internal/backend/postgres"
	"zyvor.dev/sysbox/internal/backend/sqlite"
	"zyvor.dev/sysbox/internal/backend/sqlstore"
)

// Sentinels callers branch on (the server maps them to HTTP statuses).
var (
	// ErrNotFound: no such object in this project (objects of other projects are not found
	// either, so a caller cannot tell them from absent ones).
	ErrNotFound = errors.New("not found")
	// ErrExists: a name is already taken.
	ErrExists = errors.New("already exists")
	// ErrFenced: a write named a lease epoch that is not the run's current one, or whose lease
	// lapsed, or an agent that does not hold the run.
	ErrFenced = errors.New("lease lost (fenced)")
	// ErrNoRun: nothing this agent can claim now.
	ErrNoRun = errors.New("no claimable run")
	// ErrReplay: a nonce was used before.
	ErrReplay = errors.New("nonce already used")
	// ErrNewerSchema: the database was migrated by a newer sysbox.
	ErrNewerSchema = errors.New("database schema is newer than this sysbox")
)

// Store is the control plane's persistence over one SQL database.
type Store struct {
	db       *sql.DB
	d        sqlstore.Dialect
	location string
	// Now is the clock leases are measured with (tests move it).
	Now func() time.Time

	writes    writer // nil on PostgreSQL
	watch     watch
	lastPrune atomic.Int64 // when expired nonces were last deleted (unix ns)
}

// OpenSQLite opens (creating and migrating) the SQLite database at path.
func OpenSQLite(ctx context.Context, path string) (*Store, error) {
	db, abs, err := sqlite.OpenDB(path)
	if err != nil {
		return nil, fmt.Errorf("control plane store %s: %w", path, err)
	}
	return New(ctx, db, sqlite.Dialect, abs)
}

// OpenPostgres connects to dsn and migrates the database (in the schema the dsn's
// search_path names, if any). Messages name the database without its password.
func OpenPostgres(ctx context.Context, dsn string) (*Store, error) {
	db, location, err := postgres.OpenDB(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("control plane store: %w", err)
	}
	return New(ctx, db, postgres.Dialect, location)
}

// New migrates db and returns the store; the store owns db.
func New(ctx context.Context, db *sql.DB, d sqlstore.Dialect, location string) (*Store, error) {
	s := &Store{db: db, d: d, location: location, Now: time.Now}
	if d.Kind == sqlite.Dialect.Kind {
		s.writes = make(writer, 1)
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// DB is the underlying database (for tests).
func (s *Store) DB() *sql.DB { return s.db }

// Kind is "sqlite" or "postgres".
func (s *Store) Kind() string { return s.d.Kind }

func (s *Store) q(query string) string { return s.d.Rebind(query) }

func (s *Store) wrap(op string, err error) error {
	return fmt.Errorf("control plane store %s: %s: %w", s.location, op, err)
}

func (s *Store) now() int64 { return s.Now().UnixNano() }

// newID is a random identifier with a prefix naming its kind.
func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return prefix + hex.EncodeToString(b[:])
}

func encodeList(l []string) string {
	c := append([]string{}, l...)
	sort.Strings(c)
	b, _ := json.Marshal(c)
	return string(b)
}

func decodeList(s string) []string {
	var l []string
	_ = json.Unmarshal([]byte(s), &l)
	return l
}

// covers reports whether have contains every element of want.
func covers(have, want []string) bool {
	set := map[string]bool{}
	for _, h := range have {
		set[h] = true
	}
	for _, w := range want {
		if !set[w] {
			return false
		}
	}
	return true
}

func timeOf(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// Project is a tenant: tokens, workspaces, runs and agents belong to one.
type Project struct {
	ID      string    `json:"id"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// CreateProject adds a project; its name must be new.
func (s *Store) CreateProject(ctx context.Context, name string) (Project, error) {
	p := Project{ID: newID("prj_"), Name: name, Created: timeOf(s.now())}
	res, err := s.exec(ctx, s.q(`INSERT INTO cp_projects (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO NOTHING`),
		p.ID, p.Name, p.Created.UnixNano())
	if err != nil {
		return Project{}, s.wrap("create project "+name, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return Project{}, fmt.Errorf("project %q: %w", name, ErrExists)
	}
	return p, nil
}

// Project returns the project with this id.
func (s *Store) Project(ctx context.Context, id string) (Project, error) {
	var p Project
	var created int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT id, name, created_at FROM cp_projects WHERE id = ?`), id).Scan(&p.ID, &p.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Project{}, fmt.Errorf("project %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Project{}, s.wrap("project "+id, err)
	}
	p.Created = timeOf(created)
	return p, nil
}

// Projects lists every project by name.
func (s *Store) Projects(ctx context.Context) ([]Project, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id, name, created_at FROM cp_projects ORDER BY name`)
	if err != nil {
		return nil, s.wrap("projects", err)
	}
	defer rows.Close()
	out := []Project{}
	for rows.Next() {
		var p Project
		var created int64
		if err := rows.Scan(&p.ID, &p.Name, &created); err != nil {
			return nil, s.wrap("projects", err)
		}
		p.Created = timeOf(created)
		out = append(out, p)
	}
	return out, rows.Err()
}

// Workspace is one lab (one state) of a project.
type Workspace struct {
	ID      string    `json:"id"`
	Project string    `json:"project"`
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// CreateWorkspace adds a workspace to project; its name must be new in the project.
func (s *Store) CreateWorkspace(ctx context.Context, project, name string) (Workspace, error) {
	if _, err := s.Project(ctx, project); err != nil {
		return Workspace{}, err
	}
	w := Workspace{ID: newID("ws_"), Project: project, Name: name, Created: timeOf(s.now())}
	res, err := s.exec(ctx, s.q(`INSERT INTO cp_workspaces (id, project_id, name, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (project_id, name) DO NOTHING`),
		w.ID, project, name, w.Created.UnixNano())
	if err != nil {
		return Workspace{}, s.wrap("create workspace "+name, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return Workspace{}, fmt.Errorf("workspace %q: %w", name, ErrExists)
	}
	return w, nil
}

// Workspace returns the workspace id of project.
func (s *Store) Workspace(ctx context.Context, project, id string) (Workspace, error) {
	var w Workspace
	var created int64
	err := s.db.QueryRowContext(ctx, s.q(`SELECT id, project_id, name, created_at FROM cp_workspaces WHERE id = ? AND project_id = ?`), id, project).
		Scan(&w.ID, &w.Project, &w.Name, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Workspace{}, fmt.Errorf("workspace %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Workspace{}, s.wrap("workspace "+id, err)
	}
	w.Created = timeOf(created)
	return w, nil
}

// Workspaces lists the workspaces of project by name.
func (s *Store) Workspaces(ctx context.Context, project string) ([]Workspace, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT id, project_id, name, created_at FROM cp_workspaces WHERE project_id = ? ORDER BY name`), project)
	if err != nil {
		return nil, s.wrap("workspaces", err)
	}
	defer rows.Close()
	out := []Workspace{}
	for rows.Next() {
		var w Workspace
		var created int64
		if err := rows.Scan(&w.ID, &w.Project, &w.Name, &created); err != nil {
			return nil, s.wrap("workspaces", err)
		}
		w.Created = timeOf(created)
		out = append(out, w)
	}
	return out, rows.Err()
}
