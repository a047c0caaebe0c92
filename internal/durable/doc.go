// Package durable writes files so that a crash at any instant leaves either the old or the new
// content, never a torn mix, and guards them with advisory locks.
//
// Invariants:
//   - WriteFile and WriteFileFunc write a temporary file in the target's directory, fsync it,
//     rename it over the target and fsync the directory; only then do they return nil.
//   - A lock lives in its own file, which is never unlinked (unlinking a locked file lets a second
//     process lock a fresh inode and both believe they hold the lock).
//   - Records carry a kind, a version and a SHA-256 of their payload; a reader checks the version
//     first and rejects unknown ones, and reports a torn or corrupt record instead of trusting it.
//   - Log.Append returns only after the record is on disk (fsync): a step is acknowledged only once
//     its record is durable. Concurrent appends are group-committed (one write+fsync per batch).
//     Log.AppendSeqNoSync writes a record without waiting for an fsync; the next fsync makes it
//     durable. A log is always a prefix of what was appended: a power loss may lose records
//     appended after the last fsync (unsynced ones, and waiting ones never acknowledged), never
//     one before it.
//   - A log has one repair rule (Open applies it, Read reports it): only an incomplete final
//     record (no trailing newline) may be cut, and the cut is reported; a complete record that
//     fails its checksum, even the last one, and a record numbered out of sequence are
//     corruption and refused.
package durable
