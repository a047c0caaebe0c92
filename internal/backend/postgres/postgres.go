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

// Dialect is PostgreSQL's sqlstore dialect (also used by the control plane's store).
var Dialect = sqlstore.Dialect{
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
	if name == "" {
		name = "default"
	}
	db, location, err := OpenDB(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres backend: %w", err)
	}
	return sqlstore.New(ctx, db, Dialect, name, location+"#"+name)
}

// OpenDB connects to dsn and checks the connection. It returns the database and a location
// (postgres://user@host:port/db) that holds no password; errors hold none either.
func OpenDB(ctx context.Context, dsn string) (*sql.DB, string, error) {
	if dsn == "" {
		return nil, "", fmt.Errorf("no dsn")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, "", fmt.Errorf("dsn: %s", redact(err.Error(), dsn))
	}
	location := fmt.Sprintf("postgres://%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(4)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, "", fmt.Errorf("%s: %s", location, redact(err.Error(), cfg.Password))
	}
	return db, location, nil
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
