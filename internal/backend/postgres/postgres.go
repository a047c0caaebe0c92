package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"zyvor.dev/sysbox/internal/backend/sqlstore"
)

// Backend is a PostgreSQL state backend.
type Backend = sqlstore.Store

// migrationLock is the advisory lock key serialising table creation ("sysbox" in ASCII).
const migrationLock = 0x737973626f78

var dialect = sqlstore.Dialect{
	Kind:      "postgres",
	Numbered:  true,
	Blob:      "BYTEA",
	AutoID:    "BIGSERIAL PRIMARY KEY",
	ForUpdate: " FOR UPDATE",
	Migrate: func(ctx context.Context, db *sql.DB, ddl []string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrationLock)); err != nil {
			return err
		}
		for _, stmt := range ddl {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", stmt, err)
			}
		}
		return tx.Commit()
	},
}

// New connects to dsn and returns the state called name in it.
func New(ctx context.Context, dsn, name string) (*Backend, error) {
	if dsn == "" {
		return nil, fmt.Errorf("postgres backend: no dsn")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres backend: dsn: %s", redact(err.Error(), dsn))
	}
	if name == "" {
		name = "default"
	}
	location := fmt.Sprintf("postgres://%s@%s:%d/%s#%s", cfg.User, cfg.Host, cfg.Port, cfg.Database, name)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(4)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("postgres backend %s: %s", location, redact(err.Error(), cfg.Password))
	}
	return sqlstore.New(ctx, db, dialect, name, location)
}

// Open builds a backend from settings: "dsn", "name" (the state's name in the database,
// default "default").
func Open(ctx context.Context, settings map[string]string) (*Backend, error) {
	for k := range settings {
		if k != "dsn" && k != "name" {
			return nil, fmt.Errorf("postgres backend: unknown setting %q (known: dsn, name)", k)
		}
	}
	return New(ctx, settings["dsn"], settings["name"])
}

func redact(msg, secret string) string {
	if secret == "" {
		return msg
	}
	return strings.ReplaceAll(msg, secret, "REDACTED")
}
