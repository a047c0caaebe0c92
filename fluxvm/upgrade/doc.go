// Package upgrade is the fluxvm-upgrade transaction engine: plan decoding and validation, the
// canonical plan hash, the journal, the forward and rollback sequences, status and reconcile.
//
// Invariants:
//
//   - A plan is decoded strictly: unknown fields, duplicate keys, wrong types, relative paths,
//     unknown policies, pins outside bpffs_root (lexically or through a symlink) and an
//     incompatible logical state ABI are all reported at once, each with its JSON path and
//     line:column. Nothing runs from an invalid plan.
//   - The plan's identity is the SHA-256 of its RFC 8785-style canonical form, recorded in the
//     journal's begin record; resume, rollback and reconcile refuse a plan whose hash differs.
//   - One process drives a transaction at a time: a non-blocking flock on
//     <state_dir>/<transaction_id>.lock (never unlinked), taken before the journal is read. A
//     hook left running by a killed earlier process (found through its FLUXVM_TRANSACTION_DIR)
//     counts as holding the lock.
//   - The journal (<tx>/journal.log) is an append-only log of versioned, checksummed records; a
//     step is acknowledged only after its record is fsynced. A torn or corrupt journal is
//     reported (ErrJournalCorrupt) and never acted on; only when asked (RepairTornTail) is an
//     unterminated last record — an append that never returned — set aside and dropped.
//   - A full or read-only transaction directory (ENOSPC, EDQUOT, EROFS on a file beneath it: a
//     hook log, a snapshot, the journal, the final files) is the tool's own storage failing, not
//     the step: the engine stops with an error naming the file and the transaction stays running
//     (a failed journal append leaves no partial record). Once the directory is writable again,
//     resume carries on by the journal as after a crash; a step that never got its log is
//     "in doubt" like any interrupted step (an apply is then rolled back, never re-run).
//   - The journal alone decides what happens next. A step whose start is journaled but whose
//     outcome is not is re-run if it is idempotent (preflight, snapshot, restore, health and all
//     rollback steps); an interrupted apply is never re-run: it is recorded as failed and the
//     transaction rolls back.
//   - Forward order per component: preflight, snapshot of declared files and maps, apply,
//     restore of merge/replace map state, health. Rollback covers every component whose apply
//     started, in reverse order: rollback hook, file restore, map restore, rollback_health. Any
//     rollback failure ends in manual-intervention, never success.
//   - A terminal transaction has journal.final.json and EVIDENCE.sha256 (and the signature when
//     the plan asks for one); finalization is idempotent and re-run after a crash.
//   - Hooks are argv arrays run without a shell through internal/argv, with a timeout, bounded
//     output written to <tx>/logs, and their context in FLUXVM_* environment variables only.
package upgrade
