package bpfmap

import (
	"context"
	"errors"
	"zyvor.dev/sysbox/internal/feature"
)

// Policy is what happens to a declared map's entries across an upgrade (F10).
type Policy string

const (
	MetadataOnly Policy = "metadata-only"
	Merge        Policy = "merge"
	Replace      Policy = "replace"
)

// ABI is a map's physical shape. Zero fields in a declared ABI mean "not declared".
type ABI struct {
	Type       string `json:"type,omitempty"` // kernel map type name as cilium/ebpf prints it, e.g. "Hash", "LRUHash", "Array", "PerCPUHash"
	KeySize    uint32 `json:"key_size,omitempty"`
	ValueSize  uint32 `json:"value_size,omitempty"`
	MaxEntries uint32 `json:"max_entries,omitempty"`
	Flags      uint32 `json:"flags,omitempty"`
}

// Spec is one map as the plan declares it, with its pin already resolved to an absolute path
// beneath bpffs_root by the caller. Store implementations re-check containment and the bpf magic.
type Spec struct {
	Component string
	Name      string
	Pin       string // absolute path
	BPFFSRoot string // absolute path the pin must stay beneath
	Policy    Policy
	Declared  ABI
	// NoCount makes Probe leave Info.Entries at -1: counting reads every entry (a full batch
	// read of a 1M-entry map), and Run needs only the checks, not the count.
	NoCount bool
	// SnapshotSHA256, when set, is the sha256 the snapshot file must have: Restore refuses any
	// other file (ErrCorruptSnapshot) before writing anything. The engine passes the digest it
	// journaled when the snapshot was taken, so the file is read and hashed once.
	SnapshotSHA256 string
}

// Info is what the live map says about itself.
type Info struct {
	ABI
	ID      uint32 `json:"id"`
	Entries int64  `json:"entries"` // -1 when not counted
	// Generic is false for per-CPU, map-in-map, prog-array and other encodings that are never
	// restored generically (F11).
	Generic bool `json:"generic"`
	// NonGeneric says why Generic is false (the map type, or a value field that holds kernel
	// state such as a bpf_timer or a kptr).
	NonGeneric string `json:"non_generic,omitempty"`
	BootID     string `json:"boot_id,omitempty"`
}

// SnapshotInfo describes a snapshot file written by Snapshot.
type SnapshotInfo struct {
	Path    string `json:"path"`
	Info    Info   `json:"info"`
	Entries int64  `json:"entries"`
	SHA256  string `json:"sha256"`
}

// RestoreReport says what Restore did.
type RestoreReport struct {
	Policy  Policy `json:"policy"`
	Written int64  `json:"written"`
	Deleted int64  `json:"deleted"`
	Target  Info   `json:"target"`
	Skipped bool   `json:"skipped,omitempty"` // metadata-only
	// Evicted counts restored entries an LRU map pushed out again while restore wrote (the map
	// was too full); Restore then also returns an error wrapping ErrOverCapacity.
	Evicted int64 `json:"evicted,omitempty"`
}

// Progress receives done/total counts on long operations; it may be nil.
type Progress func(done, total int64)

// Store is the engine's view of pinned-map state. The real implementation uses cilium/ebpf;
// Fake keeps maps in memory for unit tests.
type Store interface {
	// Probe opens the pin read-only and returns its live info, checking it against the declared ABI.
	Probe(ctx context.Context, spec Spec) (Info, error)
	// Snapshot writes the map's metadata and (unless the policy is metadata-only) its entries to
	// path with the durable-write discipline.
	Snapshot(ctx context.Context, spec Spec, path string, progress Progress) (SnapshotInfo, error)
	// Restore replays a snapshot into the map now pinned at spec.Pin under spec.Policy (or the
	// policy given, for rollback), refusing ABI changes and over-capacity snapshots (F9).
	Restore(ctx context.Context, spec Spec, path string, progress Progress) (RestoreReport, error)
}

// Errors callers branch on. Implementations wrap them with the component, map and pin.
var (
	ErrABIMismatch     = errors.New("map ABI mismatch")
	ErrOverCapacity    = errors.New("snapshot does not fit the replacement map")
	ErrNotGeneric      = errors.New("map encoding cannot be restored generically; use a component-specific migration hook")
	ErrPinEscape       = errors.New("pin resolves outside bpffs_root")
	ErrNotBPFFS        = errors.New("not on a bpf filesystem")
	ErrBootChanged     = errors.New("host rebooted since the snapshot (boot id changed)")
	ErrCorruptSnapshot = errors.New("snapshot file is corrupt")
	ErrNotSupported    = feature.ErrNotSupported // the module's one "host lacks a feature" error
)
