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
//   - State is saved only by compare-and-swap on the serial; concurrent workers' changes are
//     group-committed into one save the same way. An empty state is saved (serial 1) before the
//     first provider call, so the lineage in every ownership marker is durable.
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
