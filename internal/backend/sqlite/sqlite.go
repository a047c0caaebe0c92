package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"zyvor.dev/sysbox/internal/backend/sqlstore"
	"zyvor.dev/sysbox/internal/durable"
)

// Backend is a SQLite state backend.
type Backend = sqlstore.Store

// DefaultPath is the database used when no path is configured.
const DefaultPath = "sysbox.state.db"

// Dialect is SQLite's sqlstore dialect (also used by the control plane's store).
var Dialect = sqlstore.Dialect{
	Kind:   "sqlite",
	Blob:   "BLOB",
	AutoID: "INTEGER PRIMARY KEY AUTOINCREMENT",
	Migrate: func(ctx context.Context, db *sql.DB, ddl []string) error {
		tx, err := db.BeginTx(ctx, nil) // IMMEDIATE: one migrating process at a time
		if err != nil {
			return err
		}
		defer tx.Rollback()
		for _, stmt := range ddl {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return tx.Commit()
	},
}

// New opens (creating if needed) the database at path and the state called name in it.
func New(ctx context.Context, path, name string) (*Backend, error) {
	if path == "" {
		path = DefaultPath
	}
	db, abs, err := OpenDB(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite backend %s: %w", path, err)
	}
	if name == "" {
		name = "default"
	}
	return sqlstore.New(ctx, db, Dialect, name, abs+"#"+name)
}

// OpenDB opens (creating it and its directory if needed) the SQLite database at path with the
// settings every sysbox store uses: WAL, synchronous FULL, a 30 s busy timeout and IMMEDIATE
// transactions (a transaction takes the write lock when it begins, so read-then-write
// transactions serialise instead of failing). It returns the absolute path too.
func OpenDB(path string) (*sql.DB, string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	if strings.ContainsAny(abs, "?#") {
		return nil, "", fmt.Errorf("%s: a path may not contain '?' or '#'", abs)
	}
	if err := durable.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, "", err
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(30000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+abs+"?"+q.Encode())
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", abs, err)
	}
	return db, abs, nil
}

// Open builds a backend from settings: "path", "name" (the state's name in the database,
// default "default").
func Open(ctx context.Context, settings map[string]string) (*Backend, error) {
	for k := range settings {
		if k != "path" && k != "name" {
			return nil, fmt.Errorf("sqlite backend: unknown setting %q (known: path, name)", k)
		}
	}
	return New(ctx, settings["path"], settings["name"])
}
