package store

import (
	"context"
	"fmt"
	"strconv"
)

// migrations are the schema versions in order; migration i (from 0) brings the schema to
// version i+1. Statements are idempotent so a crash between two of them is repaired by
// running the migration again. Column types are the subset both databases share; blobs take
// the dialect's type.
var migrations = []func(blob string) []string{
	func(blob string) []string {
		return []string{
			`CREATE TABLE IF NOT EXISTS cp_projects (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, created_at BIGINT NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS cp_workspaces (id TEXT PRIMARY KEY, project_id TEXT NOT NULL REFERENCES cp_projects (id), name TEXT NOT NULL, created_at BIGINT NOT NULL, UNIQUE (project_id, name))`,
			`CREATE TABLE IF NOT EXISTS cp_revisions (project_id TEXT NOT NULL REFERENCES cp_projects (id), digest TEXT NOT NULL, bundle ` + blob + ` NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (project_id, digest))`,
			`CREATE TABLE IF NOT EXISTS cp_plans (id TEXT PRIMARY KEY, project_id TEXT NOT NULL REFERENCES cp_projects (id), workspace_id TEXT NOT NULL REFERENCES cp_workspaces (id), revision TEXT NOT NULL, digest TEXT NOT NULL, data ` + blob + ` NOT NULL, requires TEXT NOT NULL, created_at BIGINT NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS cp_runs (id TEXT PRIMARY KEY, project_id TEXT NOT NULL REFERENCES cp_projects (id), workspace_id TEXT NOT NULL REFERENCES cp_workspaces (id), plan_id TEXT NOT NULL, op TEXT NOT NULL, status TEXT NOT NULL, requires TEXT NOT NULL, sticky INTEGER NOT NULL, agent_id TEXT NOT NULL, epoch BIGINT NOT NULL, lease_expires BIGINT NOT NULL, next_seq BIGINT NOT NULL, result TEXT NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT NOT NULL)`,
			`CREATE INDEX IF NOT EXISTS cp_runs_claimable ON cp_runs (project_id, status, created_at)`,
			`CREATE TABLE IF NOT EXISTS cp_events (run_id TEXT NOT NULL REFERENCES cp_runs (id), seq BIGINT NOT NULL, epoch BIGINT NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL, created_at BIGINT NOT NULL, PRIMARY KEY (run_id, seq))`,
			`CREATE TABLE IF NOT EXISTS cp_projections (workspace_id TEXT NOT NULL REFERENCES cp_workspaces (id), address TEXT NOT NULL, observation TEXT NOT NULL, external_id TEXT NOT NULL, run_id TEXT NOT NULL, epoch BIGINT NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (workspace_id, address))`,
			`CREATE TABLE IF NOT EXISTS cp_agents (id TEXT PRIMARY KEY, project_id TEXT NOT NULL REFERENCES cp_projects (id), name TEXT NOT NULL, public_key ` + blob + ` NOT NULL, capabilities TEXT NOT NULL, revoked INTEGER NOT NULL, created_at BIGINT NOT NULL, seen_at BIGINT NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS cp_tokens (hash TEXT PRIMARY KEY, kind TEXT NOT NULL, project_id TEXT NOT NULL, name TEXT NOT NULL, used_at BIGINT NOT NULL, created_at BIGINT NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS cp_nonces (agent_id TEXT NOT NULL, nonce TEXT NOT NULL, expires_at BIGINT NOT NULL, PRIMARY KEY (agent_id, nonce))`,
		}
	},
	// 2: remote commands (a run's revision, arguments, exit code and the plan a plan run
	// stored) and resource generations in projections. New tables rather than new columns:
	// every statement stays idempotent on both databases.
	func(blob string) []string {
		return []string{
			`CREATE TABLE IF NOT EXISTS cp_run_specs (run_id TEXT PRIMARY KEY REFERENCES cp_runs (id), revision TEXT NOT NULL, args TEXT NOT NULL, exit_code BIGINT NOT NULL, output_plan TEXT NOT NULL)`,
			`CREATE TABLE IF NOT EXISTS cp_projection_generations (workspace_id TEXT NOT NULL REFERENCES cp_workspaces (id), address TEXT NOT NULL, generation BIGINT NOT NULL, PRIMARY KEY (workspace_id, address))`,
		}
	},
}

// SchemaVersion is the schema version this build migrates to.
var SchemaVersion = len(migrations)

func (s *Store) migrate(ctx context.Context) error {
	ddl := []string{`CREATE TABLE IF NOT EXISTS cp_schema (version BIGINT PRIMARY KEY)`}
	for i, m := range migrations {
		ddl = append(ddl, m(s.d.Blob)...)
		ddl = append(ddl, `INSERT INTO cp_schema (version) VALUES (`+strconv.Itoa(i+1)+`) ON CONFLICT (version) DO NOTHING`)
	}
	// The dialect serialises concurrent migrations (SQLite's write lock, Postgres' advisory
	// lock); a newer build's versions stay in cp_schema and are refused below.
	if err := s.d.Migrate(ctx, s.db, ddl); err != nil {
		return s.wrap("migrate", err)
	}
	var v int64
	if err := s.db.QueryRowContext(ctx, `SELECT MAX(version) FROM cp_schema`).Scan(&v); err != nil {
		return s.wrap("migrate", err)
	}
	if v > int64(SchemaVersion) {
		return s.wrap("migrate", fmt.Errorf("%w: version %d, this build knows %d", ErrNewerSchema, v, SchemaVersion))
	}
	return nil
}
