// Package bpfmap snapshots and restores the state of pinned BPF maps that an upgrade plan declares.
//
// Invariants: only the pins named in a Spec are opened, each resolved beneath its bpffs root and
// checked to be on a bpf filesystem; nothing is walked or copied recursively. Snapshots are
// versioned, checksummed files written with fsync + rename + directory fsync. Restore refuses a
// changed type, key size or value size, and a snapshot larger than the target's max entries.
// Only byte-array encodings are restored generically.
//
// # Opening a pin (F7)
//
// A pin must be an absolute path without ".." strictly beneath BPFFSRoot. It is opened with
// openat2(RESOLVE_BENEATH|RESOLVE_NO_MAGICLINKS) relative to the root, so a symlink that leads
// out (relative or absolute) fails with ErrPinEscape; the opened inode must be on a filesystem
// with BPF_FS_MAGIC (ErrNotBPFFS), and BPF_OBJ_GET is then pointed at that same inode through
// /proc/self/fd, so nothing can be swapped in between the check and the open. Kernels without
// openat2 get an EvalSymlinks + re-check fallback.
//
// # Snapshot file (F5, F9)
//
// A snapshot is magic + format version + a JSON Header (map type, key/value size, max entries,
// flags, map id, kernel name, boot id, entry count, how it was read, producing tool) followed by
// all keys and then all values as raw bytes, and a trailer with the entry count and a SHA-256 of
// everything before it. VerifySnapshot and Restore read the whole file and check version,
// trailer, checksum and exact length before any byte is used: a torn or altered file is
// ErrCorruptSnapshot, a newer format ErrSnapshotVersion.
//
// # Reading and writing entries
//
// Entries move with BPF_MAP_LOOKUP_BATCH / BPF_MAP_UPDATE_BATCH / BPF_MAP_DELETE_BATCH through
// cilium/ebpf, handing it packed buffers without copies. A batch that is smaller than a hash
// bucket (ENOSPC) is retried larger; where a map type has no batch operations
// (ErrNotSupported) the store falls back to get_next_key + lookup and per-entry updates. Large
// Hash and LRUHash maps are read by several threads, each starting at its own range of buckets
// (see parallel.go), and written by several threads. The kernel offers no point-in-time view:
// entries the datapath changes while a snapshot runs may or may not be in it.
//
// # Restore (F9, F10, F11)
//
// Restore checks, before writing anything: the boot id (a snapshot from an earlier boot is never
// replayed into whatever is pinned now: ErrBootChanged), type/key/value size (ErrABIMismatch),
// that the map type is generic (ErrNotGeneric) and, for replace, deletable (ErrNotDeletable),
// that the snapshot holds entries (ErrNoEntries), and capacity (ErrOverCapacity: the snapshot,
// or for merge the union with the keys already present, must fit max_entries). merge writes
// every snapshot entry and keeps other keys; replace deletes the target's keys that are not in
// the snapshot and writes every snapshot entry. Both are idempotent. LRU maps are checked
// afterwards for entries evicted during the restore.
//
// Per-CPU values, map-in-map, program/socket/device arrays, queues, ring buffers and storage
// maps are recorded as metadata (with a key count where the map can be iterated) and never
// restored generically; CheckPolicy refuses merge/replace for them at validate and probe time,
// pointing to component-specific migration hooks. The same holds for a Hash/Array/LRU/LPM map
// whose BTF value type holds kernel state user space cannot copy (bpf_timer, kptr, list or
// rbtree heads/nodes, refcount): Info.Generic is false and Info.NonGeneric names the field.
package bpfmap
