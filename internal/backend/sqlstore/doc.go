// Package sqlstore is the state backend shared by the SQL databases (SQLite, PostgreSQL): the
// tables, the compare-and-swap transaction, lock rows with holder info, leases, snapshots and
// deletion, over database/sql. The sqlite and postgres packages supply the connection and the
// dialect.
//
// Tables (several states share them, keyed by state name):
//
//	sysbox_states           name, lineage, serial, data (states.Encode), updated_at
//	sysbox_state_snapshots  id, name, lineage, serial, reason, data, created_at
//	sysbox_state_locks      name, id, info (backend.LockInfo JSON), created_at, expires_at
//
// Invariants: Save updates a row only `WHERE serial = expected` inside a transaction that
// first read it, so a concurrent writer's update is never overwritten; a lock is a row
// inserted with ON CONFLICT DO NOTHING, so exactly one inserter wins; a lock row outlives a
// crashed holder (force-unlock removes it by ID) unless it was taken with a TTL (lease) that
// then expired.
//
// Lease expiry times are written and compared with the clients' clocks: hosts sharing one
// database must keep their clocks in step (NTP) for leases to mean the same to all of them.
package sqlstore
