// Package bpfmap snapshots and restores the state of pinned BPF maps that an upgrade plan declares.
//
// Invariants: only the pins named in a Spec are opened, each resolved beneath its bpffs root and
// checked to be on a bpf filesystem; nothing is walked or copied recursively. Snapshots are
// versioned, checksummed files written with fsync + rename + directory fsync. Restore refuses a
// changed type, key size or value size, and a snapshot larger than the target's max entries.
// Only byte-array encodings are restored generically.
package bpfmap
