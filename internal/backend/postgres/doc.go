// Package postgres keeps topology state in PostgreSQL (github.com/jackc/pgx/v5 through its
// database/sql adapter), with the tables, CAS transactions and lock rows of
// internal/backend/sqlstore (S13).
//
// Invariants: the CAS transaction reads the state row FOR UPDATE and updates it only where the
// serial is still the expected one; table creation is serialised by a transaction-scoped
// advisory lock so that two processes starting at once do not race on DDL; the DSN's password
// never appears in the backend's location or errors.
package postgres
