// Package backend defines where sysbox keeps a topology's durable state and how it is
// protected (requirement S13), and the Manager through which the runtime reads and changes it.
//
// A backend declares its capabilities (locking, compare-and-swap, snapshot, deletion, lease,
// force-unlock) in its Descriptor. Consumers use small interfaces — Reader, Writer, Locker,
// ForceUnlocker, Snapshotter, Deleter — and the Manager refuses to mutate through a backend that
// lacks locking and compare-and-swap unless the caller explicitly allows unsafe state
// (--allow-unsafe-state, only for a caller that guarantees a single writer).
//
// Invariants:
//   - Writer.Save is a compare-and-swap on the serial: it stores st only if the stored serial
//     equals expectSerial (0: no state stored yet) and the lineage matches, else it returns a
//     *ConflictError (or *LineageError) and stores nothing. No update is ever lost silently.
//   - Locker.Lock never blocks: a held lock is a *LockedError naming the holder. Waiting
//     (-lock-timeout) is LockWait's job, the same for every backend.
//   - The Manager reads the serial under the lock, saves by CAS against what it read, and
//     snapshots the prior state before a destructive operation.
//   - Backends store the document states.Encode produced and return what states.Decode accepts:
//     version, checksum and ownership checks happen on every read, before any mutation.
package backend
