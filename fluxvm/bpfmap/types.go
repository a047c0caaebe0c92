package bpfmap

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
)

// Errors added beside the ones in store.go. Callers branch on them with errors.Is.
var (
	// ErrNotDeletable: the replace policy needs a map whose keys can be deleted (hash family).
	ErrNotDeletable = errors.New("replace needs a deletable hash-family map (Hash, LRUHash)")
	// ErrSnapshotVersion: the snapshot was written by a newer or unknown format version.
	ErrSnapshotVersion = errors.New("unknown snapshot format version")
	// ErrNoEntries: the snapshot holds metadata only (metadata-only policy or a non-generic map),
	// so it cannot be replayed under merge or replace.
	ErrNoEntries = errors.New("snapshot holds metadata only, no entries to replay")
	// ErrMapMissing: nothing is pinned at the declared path (on the same boot).
	ErrMapMissing = errors.New("no map pinned at the declared path")
	// ErrUnknownType: a declared map type name is not a known kernel map type.
	ErrUnknownType = errors.New("unknown map type")
)

// typeAliases maps lower-cased spellings to cilium/ebpf's MapType. Both cilium/ebpf names
// ("LRUHash") and kernel/bpftool names ("lru_hash", "BPF_MAP_TYPE_LRU_HASH") are accepted.
var typeAliases = func() map[string]ebpf.MapType {
	m := map[string]ebpf.MapType{}
	for t := ebpf.Hash; t <= ebpf.Arena; t++ {
		name := t.String()
		if strings.HasPrefix(name, "MapType(") {
			continue
		}
		m[strings.ToLower(name)] = t
	}
	kernel := map[string]ebpf.MapType{
		"hash": ebpf.Hash, "array": ebpf.Array, "prog_array": ebpf.ProgramArray,
		"perf_event_array": ebpf.PerfEventArray, "percpu_hash": ebpf.PerCPUHash,
		"percpu_array": ebpf.PerCPUArray, "stack_trace": ebpf.StackTrace,
		"cgroup_array": ebpf.CGroupArray, "lru_hash": ebpf.LRUHash,
		"lru_percpu_hash": ebpf.LRUCPUHash, "lpm_trie": ebpf.LPMTrie,
		"array_of_maps": ebpf.ArrayOfMaps, "hash_of_maps": ebpf.HashOfMaps,
		"devmap": ebpf.DevMap, "sockmap": ebpf.SockMap, "cpumap": ebpf.CPUMap,
		"xskmap": ebpf.XSKMap, "sockhash": ebpf.SockHash,
		"cgroup_storage": ebpf.CGroupStorage, "reuseport_sockarray": ebpf.ReusePortSockArray,
		"percpu_cgroup_storage": ebpf.PerCPUCGroupStorage, "queue": ebpf.Queue,
		"stack": ebpf.Stack, "sk_storage": ebpf.SkStorage, "devmap_hash": ebpf.DevMapHash,
		"struct_ops": ebpf.StructOpsMap, "ringbuf": ebpf.RingBuf,
		"inode_storage": ebpf.InodeStorage, "task_storage": ebpf.TaskStorage,
		"bloom_filter": ebpf.BloomFilter, "user_ringbuf": ebpf.UserRingbuf,
		"cgrp_storage": ebpf.CgroupStorage, "arena": ebpf.Arena,
	}
	for k, v := range kernel {
		m[k] = v
		m["bpf_map_type_"+k] = v
	}
	return m
}()

// ParseType returns the map type a declared type name means. Matching ignores case and accepts
// cilium/ebpf names ("LRUHash") as well as kernel/bpftool names ("lru_hash").
func ParseType(name string) (ebpf.MapType, error) {
	t, ok := typeAliases[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return ebpf.UnspecifiedMap, fmt.Errorf("map type %q: %w", name, ErrUnknownType)
	}
	return t, nil
}

// NormalizeType returns the canonical (cilium/ebpf) spelling of a declared type name, the form
// Info.Type uses, so that a declared "lru_hash" compares equal to a live "LRUHash".
func NormalizeType(name string) (string, error) {
	t, err := ParseType(name)
	if err != nil {
		return "", err
	}
	return t.String(), nil
}

// genericMapType reports whether entries of t are plain key bytes -> value bytes that can be read
// with a lookup and written back with an update, with the same meaning, into a new map (F11).
// Per-CPU values, file descriptors (programs, maps, sockets, devices), stack ids, queues and
// storage maps keyed by kernel objects are not.
func genericMapType(t ebpf.MapType) bool {
	switch t {
	case ebpf.Hash, ebpf.Array, ebpf.LRUHash, ebpf.LPMTrie:
		return true
	}
	return false
}

// deletableMapType reports whether t is a hash-family map whose keys can be deleted, which the
// replace policy needs (F10).
func deletableMapType(t ebpf.MapType) bool {
	return t == ebpf.Hash || t == ebpf.LRUHash
}

// GenericType reports whether a map of the named type can be restored generically (byte-array
// keys and values). It is false for per-CPU, map-in-map, program arrays and other nested
// encodings, and for unknown names.
func GenericType(typeName string) bool {
	t, err := ParseType(typeName)
	return err == nil && genericMapType(t)
}

// DeletableType reports whether the named type is a hash-family map that replace may empty.
func DeletableType(typeName string) bool {
	t, err := ParseType(typeName)
	return err == nil && deletableMapType(t)
}

// CheckPolicy says whether policy p may be used on a map of the named type: metadata-only fits
// every type; merge needs a generic type; replace needs a generic, deletable hash-family type.
// Validate and Probe use it so that a plan is refused before anything runs (F11). The error
// wraps ErrNotGeneric, ErrNotDeletable, ErrUnknownType or names the unknown policy.
func CheckPolicy(typeName string, p Policy) error {
	switch p {
	case MetadataOnly, Merge, Replace:
	default:
		return fmt.Errorf("policy %q: want %s, %s or %s", p, MetadataOnly, Merge, Replace)
	}
	t, err := ParseType(typeName)
	if err != nil {
		return err
	}
	return checkPolicy(t, p)
}

func checkPolicy(t ebpf.MapType, p Policy) error {
	if p == MetadataOnly {
		return nil
	}
	if !genericMapType(t) {
		return fmt.Errorf("policy %s on a %s map: %w (or declare it metadata-only)", p, t, ErrNotGeneric)
	}
	if p == Replace && !deletableMapType(t) {
		return fmt.Errorf("policy %s on a %s map: %w; use merge", p, t, ErrNotDeletable)
	}
	return nil
}
