// Package sqlite keeps topology state in a SQLite database (modernc.org/sqlite, no cgo), with
// the tables, CAS transactions and lock rows of internal/backend/sqlstore (S13).
//
// Invariants: the database runs in WAL mode with synchronous=FULL (a committed save survives a
// crash); every transaction begins IMMEDIATE, so two processes' CAS transactions serialise on
// the database write lock instead of failing half-way; busy waits are bounded.
package sqlite
