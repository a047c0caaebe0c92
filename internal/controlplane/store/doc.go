// Package store persists the control plane's objects in one SQL schema that runs unchanged on
// SQLite (modernc, the embedded default in a data directory) and PostgreSQL (pgx):
//
//	cp_schema       applied migration versions
//	cp_projects     id, name
//	cp_workspaces   id, project, name (unique per project)
//	cp_revisions    project, digest (sha256 of the bundle), bundle: immutable, content-addressed
//	cp_plans        id, project, workspace, revision, digest, data (stored-plan file bytes), requires
//	cp_runs         id, project, workspace, plan, op, status, requires, sticky, agent, epoch,
//	                lease_expires, next_seq, result
//	cp_events       run, seq, epoch, kind, data: append-only, seq dense per run from 1
//	cp_projections  workspace, address, observation, external_id, run, epoch
//	cp_agents       id, project, name, public key, capabilities, revoked
//	cp_tokens       sha256 of the token, kind (admin, project, join), project, used
//	cp_nonces       agent, nonce, expiry: replay protection for signed requests
//	cp_run_specs    run, revision, args, exit code, output plan: what a remote command runs
//	                (a run without a plan names its revision) and how it ended
//	cp_projection_generations  workspace, address, generation (resets raise it)
//
// Invariants:
//   - No token is stored: only its SHA-256. Plans are the stored-plan files of internal/plans,
//     which hold no secret plaintext and no private envelope; the store keeps their bytes.
//   - A revision row is never updated: putting the same bundle again returns the same digest.
//   - Leases fence writers. ClaimRun sets agent, lease expiry and epoch+1 in one
//     compare-and-swap on the epoch it read, so of concurrent claimers exactly one wins. Every
//     write on behalf of a run (events, projections, renewals, completion) names the epoch it
//     holds and is refused with ErrFenced unless that epoch is the run's current one and its
//     lease has not lapsed: a paused agent that lost its lease cannot write.
//   - Events are appended in the same transaction that advances the run's next sequence
//     number under the epoch check, so sequence numbers are dense and never reused.
//   - Lease times are unix nanoseconds from the store's clock (the server's): agents never
//     compare their clocks with the database.
package store
