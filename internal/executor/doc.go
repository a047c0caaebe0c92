// Package executor is sysbox's checkpointed executor (S14), its crash recovery, node reset (S15),
// destroy with ownership-checked residue audit (S16), refresh, import (S22) and guest exec.
//
// An apply runs like this: take the state lock; read the state and refuse it if it lacks the
// identity or ownership the schema requires (states.Check, NodeState.CheckPrivate); finish any
// interrupted run first (recovery); verify the stored plan against the state (stale plan: no
// mutation); check that every driver declares the capabilities its actions need; snapshot the
// state when anything is destroyed; then walk the actions — removals in reverse dependency
// order, then creations in dependency order — with bounded parallelism.
//
// Invariants:
//   - Every operation's substep is recorded in the checkpoint log (a versioned, checksummed
//     record carrying address, action, desired spec, owner anchors, provider handle,
//     attachments and completed step) and fsynced BEFORE the next provider call that depends
//     on it. Concurrent workers' records are group-committed: one write+fsync for all records
//     that arrived while the previous fsync was in flight; each worker returns only after its
//     own record is durable.
//   - Which record is fsynced before which step (syncedBefore). Fsynced, the worker waiting:
//     the run header before any operation; begin before the first provider call (without it
//     recovery would not know the operation, and what it made would leak); created (the
//     handle) before attaching or wiring; attached (each attachment's state) before the next
//     attachment or the guest configuration; detached before the deletion; a replace's
//     deleted before it creates the new generation; applied, observed, provisioning
//     (before the first provisioner), provisioned, reapplied; baseline-verified; state-saved
//     before a reset deletes the prior generation; prior-cleaned; failed; and the end record.
//     Written (write(2): a killed process keeps them) but left to the next fsync, because
//     they guard no step that recovery does not redo idempotently anyway: wired (recovery
//     from attached configures the guest network again), started (recovery starts every node
//     it continues again), a delete's deleted (only its state save follows; recovery deletes
//     again and "already gone" counts as done) and done (written after the state save that
//     holds the result; recovery from the step before observes the object, adopts it and
//     saves it again). A power loss loses at most the records after the log's last fsync — a
//     suffix made only of such markers and of records whose worker had not been acknowledged,
//     so had not taken the step they guard (TestPowerLossAtEveryRecord cuts the log back to
//     its fsynced length at every record and recovers).
//   - State is saved only by compare-and-swap on the serial; concurrent workers' changes are
//     group-committed into one save the same way. An empty state is saved (serial 1) before the
//     first provider call, so the lineage in every ownership marker is durable. Background
//     saves (an operation's result) are paced: after a save that took d the saver waits 9·d
//     (at most 2 s), so saving the whole state takes about a tenth of the run, not O(N) per
//     operation; a caller that must wait (commit: reset, degraded nodes, outputs) and the end
//     of the walk cut the pause short. Nothing in the walk waits for a background save: an
//     operation's dependents start when it returns, only its done record and progress event
//     wait.
//   - A checkpoint never holds secret plaintext: desired specs hold secret references; the
//     plaintext is produced by Executor.Resolve right before the provider call and goes only
//     into that call's arguments (substrate.NodeSpec.Environment is not serializable).
//   - Recovery reads only the checkpoint, never log text. It re-observes each recorded handle:
//     Absent means the substep must be redone, Unknown (or an unavailable driver) stops recovery
//     with the checkpoint kept, markers that are not the operation's own stop it too. Providers
//     create idempotently on the complete owner, so an object made just before a crash is
//     adopted, not duplicated. A finished recovery removes the log; a second one finds nothing.
//   - Destructive driver calls carry the owner anchors state recorded; the driver compares them
//     with the object's markers and refuses on mismatch or incomplete evidence. Reset deletes the
//     prior generation only after the replacement was observed present and state was saved.
//   - The executor never interprets provider-private envelopes; it stores and passes them.
package executor
