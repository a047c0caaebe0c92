// Package local keeps a topology's state in a file (S13).
//
// Files, next to the state file P:
//
//	P             the state document (states.Encode), replaced atomically (internal/durable)
//	P.lock        the state lock: an flock held for a whole operation; records the holder's pid
//	P.lock.json   who holds the state lock (backend.LockInfo), written after taking it
//	P.cas.lock    a short flock serialising compare-and-swap writers
//	P.snapshots/  copies of P taken before destructive operations
//
// Invariants: lock files are never unlinked; P is never truncated in place; Save compares the
// stored serial under P.cas.lock, so two processes saving at once never lose an update. The
// state lock is a kernel flock: it ends when its holder exits, so there is no stale lock to
// force-unlock and the backend does not declare force-unlock.
package local
