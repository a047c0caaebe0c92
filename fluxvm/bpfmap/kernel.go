package bpfmap

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/durable"
)

// DefaultBootIDPath is where Linux publishes the id of the current boot. A snapshot records it;
// restore refuses a snapshot from another boot (bpffs is empty after a reboot, so whatever is
// pinned now is not the map the snapshot came from).
const DefaultBootIDPath = "/proc/sys/kernel/random/boot_id"

// DefaultBatchEntries is how many entries one batch syscall moves, at most.
const DefaultBatchEntries = 1 << 16

// maxBatchBytes caps the keys+values one batch moves, so that maps with large values do not
// allocate huge buffers per batch.
const maxBatchBytes = 8 << 20

// KernelStore is the real Store: it opens declared pins with cilium/ebpf and moves entries with
// BPF_MAP_*_BATCH, falling back to per-entry syscalls where the map type has no batch support.
type KernelStore struct {
	bootIDPath string
	tool       string
	batch      int
	parallel   int  // workers for large hash-family maps
	noBatch    bool // tests: behave as on a kernel without batch map operations
	now        func() time.Time
}

var _ Store = (*KernelStore)(nil)

// Option configures a KernelStore.
type Option func(*KernelStore)

// WithTool records the producing tool and version (e.g. "fluxvm-upgrade 0.3.0") in snapshots.
func WithTool(nameVersion string) Option { return func(s *KernelStore) { s.tool = nameVersion } }

// WithBootIDPath reads the boot id from path instead of DefaultBootIDPath (tests).
func WithBootIDPath(path string) Option { return func(s *KernelStore) { s.bootIDPath = path } }

// WithBatchEntries sets the entries per batch syscall (and so how often Progress is called).
func WithBatchEntries(n int) Option {
	return func(s *KernelStore) {
		if n > 0 {
			s.batch = n
		}
	}
}

// WithParallel sets how many threads read or write a large hash-family map at once (default:
// GOMAXPROCS, at most 4). 1 disables parallel access.
func WithParallel(n int) Option {
	return func(s *KernelStore) {
		if n > 0 {
			s.parallel = n
		}
	}
}

// NewStore returns the real, kernel-backed Store.
func NewStore(opts ...Option) *KernelStore {
	s := &KernelStore{bootIDPath: DefaultBootIDPath, tool: "fluxvm-upgrade", batch: DefaultBatchEntries, now: time.Now,
		parallel: min(runtime.GOMAXPROCS(0), 4)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// batchFor is the number of entries of ks+vs bytes one batch moves.
func (s *KernelStore) batchFor(ks, vs int) int {
	b := s.batch
	if lim := maxBatchBytes / max(ks+vs, 1); lim < b {
		b = max(lim, 1)
	}
	return b
}

// BootID returns the id of the current boot as the store sees it.
func (s *KernelStore) BootID() (string, error) { return readBootID(s.bootIDPath) }

// CurrentBootID returns /proc/sys/kernel/random/boot_id.
func CurrentBootID() (string, error) { return readBootID(DefaultBootIDPath) }

// bootIDPattern is the form the kernel prints (a random UUID, lower-case).
var bootIDPattern = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// readBootID fails closed: an unreadable, empty or malformed boot id is an error, never a value
// that could compare equal (or unequal) by accident.
func readBootID(path string) (string, error) {
	b, err := durable.ReadRegular(path, 4096)
	if err != nil {
		return "", fmt.Errorf("boot id: %w", err)
	}
	id := strings.TrimSuffix(string(b), "\n")
	if id == "" {
		return "", fmt.Errorf("boot id: %s is empty", path)
	}
	if !bootIDPattern.MatchString(id) {
		return "", fmt.Errorf("boot id: %s holds %q, not a UUID", path, truncate(id, 64))
	}
	return id, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func where(spec Spec) string {
	if spec.Component != "" {
		return fmt.Sprintf("component %s: map %s", spec.Component, spec.Name)
	}
	return "map " + spec.Name
}

func report(p Progress, done, total int64) {
	if p != nil {
		p(done, total)
	}
}

// openMap resolves the declared pin beneath its root and opens the map behind it.
func (s *KernelStore) openMap(spec Spec, readOnly bool) (*ebpf.Map, error) {
	ref, err := resolvePin(spec.BPFFSRoot, spec.Pin)
	if err != nil {
		return nil, err
	}
	defer ref.Close()
	opts := &ebpf.LoadPinOptions{ReadOnly: readOnly}
	m, err := ebpf.LoadPinnedMap(ref.objPath(), opts)
	if err != nil && ref.fd >= 0 && errors.Is(err, unix.ENOENT) {
		// /proc may be missing (a minimal chroot): fall back to the evaluated path.
		if _, statErr := os.Stat("/proc/self/fd"); statErr != nil {
			ref2, err2 := resolvePinFallback(filepath.Clean(spec.BPFFSRoot), spec.Pin)
			if err2 != nil {
				return nil, err2
			}
			m, err = ebpf.LoadPinnedMap(ref2.objPath(), opts)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("pin %s: open map: %w", spec.Pin, err)
	}
	return m, nil
}

// liveInfo describes an open map. Entries is -1 (not counted) and BootID is filled by callers.
func liveInfo(m *ebpf.Map) (Info, ebpf.MapType, string, error) {
	mi, err := m.Info()
	if err != nil {
		return Info{}, 0, "", fmt.Errorf("map info: %w", err)
	}
	id, _ := mi.ID()
	info := Info{
		ABI: ABI{
			Type:       mi.Type.String(),
			KeySize:    mi.KeySize,
			ValueSize:  mi.ValueSize,
			MaxEntries: mi.MaxEntries,
			Flags:      mi.Flags,
		},
		ID:      uint32(id),
		Entries: -1,
		Generic: genericMapType(mi.Type),
	}
	if !info.Generic {
		info.NonGeneric = fmt.Sprintf("map type %s is not a plain byte-array encoding", mi.Type)
	} else {
		special, err := valueSpecialField(m)
		if err != nil {
			// Fail closed: a value type we cannot inspect might hold kernel state.
			return info, mi.Type, mi.Name, fmt.Errorf("inspect value type: %w", err)
		}
		if special != "" {
			info.Generic = false
			info.NonGeneric = "value field " + special + " holds kernel state that user space cannot copy"
		}
	}
	return info, mi.Type, mi.Name, nil
}

// checkInfoPolicy is checkPolicy for a live map, which may also be non-generic because of what
// its values hold.
func checkInfoPolicy(info Info, t ebpf.MapType, p Policy) error {
	if err := checkPolicy(t, p); err != nil {
		return err
	}
	if p != MetadataOnly && !info.Generic {
		return fmt.Errorf("policy %s on a %s map: %s: %w (or declare it metadata-only)", p, t, info.NonGeneric, ErrNotGeneric)
	}
	return nil
}

// checkDeclaredABI compares a declared ABI with a live map and reports every difference at once.
// maxEntries is compared only when withMax (the replacement map may legitimately grow).
func checkDeclaredABI(decl ABI, live Info, withMax bool) error {
	var diffs []string
	if decl.Type != "" {
		want, err := NormalizeType(decl.Type)
		if err != nil {
			diffs = append(diffs, fmt.Sprintf("type: declared %q is not a known map type", decl.Type))
		} else if want != live.Type {
			diffs = append(diffs, fmt.Sprintf("type: declared %s, live %s", want, live.Type))
		}
	}
	if decl.KeySize != 0 && decl.KeySize != live.KeySize {
		diffs = append(diffs, fmt.Sprintf("key_size: declared %d, live %d", decl.KeySize, live.KeySize))
	}
	if decl.ValueSize != 0 && decl.ValueSize != live.ValueSize {
		diffs = append(diffs, fmt.Sprintf("value_size: declared %d, live %d", decl.ValueSize, live.ValueSize))
	}
	if withMax && decl.MaxEntries != 0 && decl.MaxEntries != live.MaxEntries {
		diffs = append(diffs, fmt.Sprintf("max_entries: declared %d, live %d", decl.MaxEntries, live.MaxEntries))
	}
	if withMax && decl.Flags != 0 && decl.Flags != live.Flags {
		diffs = append(diffs, fmt.Sprintf("flags: declared %#x, live %#x", decl.Flags, live.Flags))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: %s", ErrABIMismatch, strings.Join(diffs, "; "))
	}
	return nil
}

// checkRestorable refuses a replacement map whose type, key size or value size differs from the
// snapshot's (F9). Max entries and flags may change.
func checkRestorable(snap, target Info) error {
	var diffs []string
	if snap.Type != target.Type {
		diffs = append(diffs, fmt.Sprintf("type: snapshot %s, target %s", snap.Type, target.Type))
	}
	if snap.KeySize != target.KeySize {
		diffs = append(diffs, fmt.Sprintf("key_size: snapshot %d, target %d", snap.KeySize, target.KeySize))
	}
	if snap.ValueSize != target.ValueSize {
		diffs = append(diffs, fmt.Sprintf("value_size: snapshot %d, target %d", snap.ValueSize, target.ValueSize))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: %s", ErrABIMismatch, strings.Join(diffs, "; "))
	}
	return nil
}

// Probe opens the declared pin read-only, reads the live map's metadata, counts its entries
// (unless spec.NoCount) and checks it against the declared ABI and the policy (F9, F11). The returned Info is filled as
// far as it could be read, also when an error is returned.
func (s *KernelStore) Probe(ctx context.Context, spec Spec) (Info, error) {
	m, err := s.openMap(spec, true)
	if err != nil {
		return Info{Entries: -1}, fmt.Errorf("%s: %w", where(spec), err)
	}
	defer m.Close()
	info, t, _, err := liveInfo(m)
	if err != nil {
		return Info{Entries: -1}, fmt.Errorf("%s: pin %s: %w", where(spec), spec.Pin, err)
	}
	if info.BootID, err = s.BootID(); err != nil {
		return info, fmt.Errorf("%s: %w", where(spec), err)
	}
	if !spec.NoCount {
		n, err := s.count(ctx, m, t, nil)
		if err != nil {
			return info, fmt.Errorf("%s: pin %s: count entries: %w", where(spec), spec.Pin, err)
		}
		info.Entries = n
	}
	if err := checkDeclaredABI(spec.Declared, info, true); err != nil {
		return info, fmt.Errorf("%s: pin %s: %w", where(spec), spec.Pin, err)
	}
	if err := checkInfoPolicy(info, t, spec.Policy); err != nil {
		return info, fmt.Errorf("%s: %w", where(spec), err)
	}
	return info, nil
}

// Snapshot writes the map's metadata and, for merge/replace on a generic map, all its entries to
// path (temp file, fsync, rename, fsync dir). Progress gets (done, max_entries) while reading
// and (n, n) at the end. The map is read with batch lookups; entries changed by the datapath
// while the snapshot runs may or may not be included (the kernel gives no point-in-time view).
func (s *KernelStore) Snapshot(ctx context.Context, spec Spec, path string, progress Progress) (SnapshotInfo, error) {
	fail := func(err error) (SnapshotInfo, error) {
		return SnapshotInfo{}, fmt.Errorf("%s: snapshot: %w", where(spec), err)
	}
	switch spec.Policy {
	case MetadataOnly, Merge, Replace:
	default:
		return fail(fmt.Errorf("policy %q: want %s, %s or %s", spec.Policy, MetadataOnly, Merge, Replace))
	}
	m, err := s.openMap(spec, true)
	if err != nil {
		return fail(err)
	}
	defer m.Close()
	info, t, kname, err := liveInfo(m)
	if err != nil {
		return fail(fmt.Errorf("pin %s: %w", spec.Pin, err))
	}
	if info.BootID, err = s.BootID(); err != nil {
		return fail(err)
	}
	if err := checkDeclaredABI(spec.Declared, info, true); err != nil {
		return fail(fmt.Errorf("pin %s: %w", spec.Pin, err))
	}
	if err := checkInfoPolicy(info, t, spec.Policy); err != nil {
		return fail(err)
	}

	h := &Header{
		Tool: s.tool, CreatedAt: s.now().UTC(), Component: spec.Component, Map: spec.Name,
		Pin: spec.Pin, Policy: spec.Policy, KernelName: kname, BootID: info.BootID,
		MapID: info.ID, ByteOrder: hostByteOrder(), Method: "none",
	}
	var entries *entryChunks
	if spec.Policy != MetadataOnly {
		entries, h.Method, err = s.dump(ctx, m, true, func(done int64) { report(progress, done, int64(info.MaxEntries)) })
		if err != nil {
			return fail(fmt.Errorf("pin %s: read entries: %w", spec.Pin, err))
		}
		h.Recorded = true
		info.Entries = entries.n
	} else {
		if info.Entries, err = s.count(ctx, m, t, nil); err != nil {
			return fail(fmt.Errorf("pin %s: count entries: %w", spec.Pin, err))
		}
	}
	h.Info = info

	var sum string
	err = durable.WriteFileTo(path, 0o600, func(f *os.File) error {
		var err error
		sum, err = writeSnapshotBlocks(f, h, entries, startWriteback(f))
		return err
	})
	if err != nil {
		return fail(err)
	}
	report(progress, h.Entries, h.Entries)
	return SnapshotInfo{Path: path, Info: info, Entries: h.Entries, SHA256: sum}, nil
}

// startWriteback returns a callback that asks the kernel to start writing each block of f to
// disk as soon as it is written, so the disk works while the rest is written and hashed and the
// closing fsync (which alone makes the file durable) has little left. It is only a hint: an
// error (a file system without it) changes nothing but the timing.
func startWriteback(f *os.File) func(off, n int64) {
	fd := int(f.Fd())
	return func(off, n int64) {
		_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
	}
}

// Restore replays the snapshot at path into the map now pinned at spec.Pin under spec.Policy.
// It refuses, before writing anything: a snapshot path that is not a regular file (a symlink:
// durable.ErrNotRegular), a corrupt snapshot or, when spec.SnapshotSHA256 is set, any but the
// expected one (ErrCorruptSnapshot), a snapshot from another boot (ErrBootChanged), a target
// whose type, key size or value size differs (ErrABIMismatch), a non-generic map
// (ErrNotGeneric), a snapshot without entries (ErrNoEntries), and a snapshot — or, for merge,
// the union with the target's current keys — larger than the target's max_entries
// (ErrOverCapacity).
//
// merge writes every snapshot entry (snapshot values win) and keeps the target's other keys.
// replace leaves the target holding exactly the snapshot: target keys absent from the snapshot
// are deleted and every snapshot entry is written. Keys present in both are overwritten in
// place rather than deleted first, so a running datapath never sees them missing; the end state
// is the one "delete all, then replay" gives. Both are idempotent, so a restore interrupted by a
// crash can simply be run again.
func (s *KernelStore) Restore(ctx context.Context, spec Spec, path string, progress Progress) (RestoreReport, error) {
	rep := RestoreReport{Policy: spec.Policy, Target: Info{Entries: -1}}
	fail := func(err error) (RestoreReport, error) {
		return rep, fmt.Errorf("%s: restore %s: %w", where(spec), spec.Policy, err)
	}
	switch spec.Policy {
	case MetadataOnly, Merge, Replace:
	default:
		return fail(fmt.Errorf("policy %q: want %s, %s or %s", spec.Policy, MetadataOnly, Merge, Replace))
	}
	sd, err := readSnapshotFile(path, spec.SnapshotSHA256)
	if err != nil {
		return fail(err)
	}
	h := &sd.Header
	boot, err := s.BootID()
	if err != nil {
		return fail(err)
	}
	if err := checkSnapshotHost(spec, path, h, boot); err != nil {
		return fail(err)
	}

	m, err := s.openMap(spec, spec.Policy == MetadataOnly)
	if err != nil {
		return fail(err)
	}
	defer m.Close()
	target, t, _, err := liveInfo(m)
	if err != nil {
		return fail(fmt.Errorf("pin %s: %w", spec.Pin, err))
	}
	target.BootID = boot
	rep.Target = target
	if spec.Policy == MetadataOnly {
		rep.Skipped = true
		return rep, nil
	}
	if err := checkSnapshotFits(spec, path, h, target, t); err != nil {
		return fail(err)
	}

	final, err := s.makeRoom(ctx, m, spec, sd, target, t, &rep)
	if err != nil {
		return fail(err)
	}
	rep.Written, err = s.update(ctx, m, sd.Keys, sd.Values, int(target.KeySize), int(target.ValueSize), h.Entries, progress)
	if err != nil {
		return fail(fmt.Errorf("pin %s: %w", spec.Pin, err))
	}
	rep.Target.Entries = final
	if t == ebpf.LRUHash {
		if err := s.checkNoneEvicted(ctx, m, spec, sd, target, &rep); err != nil {
			return fail(err)
		}
	}
	return rep, nil
}

// checkSnapshotHost refuses a snapshot taken on a host of the other byte order, and, unless
// only metadata is restored, one taken in another boot (the pinned map is then not the one
// snapshotted), saying when the reboot emptied bpffs.
func checkSnapshotHost(spec Spec, path string, h *Header, boot string) error {
	if h.ByteOrder != "" && h.ByteOrder != hostByteOrder() {
		return fmt.Errorf("snapshot %s was taken on a %s-endian host, this one is %s-endian: %w",
			path, h.ByteOrder, hostByteOrder(), ErrABIMismatch)
	}
	if h.BootID == boot || spec.Policy == MetadataOnly {
		return nil
	}
	err := fmt.Errorf("snapshot %s was taken in boot %s, the host is now in boot %s; the map pinned at %s is not the one snapshotted: %w",
		path, h.BootID, boot, spec.Pin, ErrBootChanged)
	ref, perr := resolvePin(spec.BPFFSRoot, spec.Pin)
	if ref != nil {
		ref.Close()
	}
	if errors.Is(perr, ErrMapMissing) {
		err = fmt.Errorf("%w; %w (bpffs emptied by the reboot)", err, perr)
	}
	return err
}

// checkSnapshotFits refuses a snapshot the target map cannot take: another ABI, a policy the
// map type does not allow, no recorded entries, or more entries than max_entries.
func checkSnapshotFits(spec Spec, path string, h *Header, target Info, t ebpf.MapType) error {
	if err := checkRestorable(h.Info, target); err != nil {
		return fmt.Errorf("snapshot %s into pin %s: %w", path, spec.Pin, err)
	}
	if err := checkDeclaredABI(spec.Declared, target, false); err != nil {
		return fmt.Errorf("pin %s: %w", spec.Pin, err)
	}
	if err := checkInfoPolicy(target, t, spec.Policy); err != nil {
		return err
	}
	if !h.Recorded {
		return fmt.Errorf("snapshot %s (taken under %s): %w", path, h.Policy, ErrNoEntries)
	}
	if h.Entries > int64(target.MaxEntries) {
		return fmt.Errorf("snapshot %s holds %d entries, map at %s has max_entries %d: %w",
			path, h.Entries, spec.Pin, target.MaxEntries, ErrOverCapacity)
	}
	return nil
}

// makeRoom prepares a hash map for the snapshot's entries under the policy: merge checks the
// union fits, replace deletes the target keys absent from the snapshot (counted in
// rep.Deleted). It returns the number of entries the map holds once the snapshot is written
// (an array always holds max_entries).
func (s *KernelStore) makeRoom(ctx context.Context, m *ebpf.Map, spec Spec, sd *Snapshot, target Info, t ebpf.MapType, rep *RestoreReport) (int64, error) {
	h := &sd.Header
	if t == ebpf.Array {
		return int64(target.MaxEntries), nil
	}
	ks := int(target.KeySize)
	current, _, err := s.dump(ctx, m, true, nil)
	if err != nil {
		return 0, fmt.Errorf("pin %s: read current entries: %w", spec.Pin, err)
	}
	var extra [][]byte // target keys not in the snapshot
	if current.n > 0 {
		extra = keysNotIn(current, ks, sd.Keys)
	}
	final := h.Entries
	switch spec.Policy {
	case Merge:
		final = h.Entries + int64(len(extra))
		if final > int64(target.MaxEntries) {
			return 0, fmt.Errorf("merging %d snapshot entries with %d other entries already in %s exceeds max_entries %d: %w",
				h.Entries, len(extra), spec.Pin, target.MaxEntries, ErrOverCapacity)
		}
	case Replace:
		rep.Deleted, err = s.deleteKeys(ctx, m, extra, ks)
		if err != nil {
			return 0, fmt.Errorf("pin %s: delete %d keys not in the snapshot: %w", spec.Pin, len(extra), err)
		}
	}
	return final, nil
}

// checkNoneEvicted checks every restored key is still in an LRU map, which evicts instead of
// refusing and may do so before it is full (free nodes cached per CPU). Evictions are counted
// in rep.Evicted and make the target's entry count unknown.
func (s *KernelStore) checkNoneEvicted(ctx context.Context, m *ebpf.Map, spec Spec, sd *Snapshot, target Info, rep *RestoreReport) error {
	var err error
	if rep.Evicted, err = s.missingKeys(ctx, m, sd.Keys, int(target.KeySize)); err != nil {
		return fmt.Errorf("pin %s: verify restored keys: %w", spec.Pin, err)
	}
	if rep.Evicted > 0 {
		rep.Target.Entries = -1
		return fmt.Errorf("LRU map at %s evicted %d of the %d restored entries (max_entries %d): %w",
			spec.Pin, rep.Evicted, sd.Header.Entries, target.MaxEntries, ErrOverCapacity)
	}
	return nil
}

// missingKeys counts the packed keys that m does not hold.
func (s *KernelStore) missingKeys(ctx context.Context, m *ebpf.Map, keys []byte, ks int) (int64, error) {
	cur, _, err := s.dump(ctx, m, true, nil)
	if err != nil {
		return 0, err
	}
	packed := make([]byte, 0, cur.n*int64(ks))
	for _, kb := range cur.keys {
		packed = append(packed, kb...)
	}
	set := newKeySet(packed, ks)
	var missing int64
	for off := 0; off+ks <= len(keys); off += ks {
		if !set.has(keys[off : off+ks]) {
			missing++
		}
	}
	return missing, nil
}

// keysNotIn returns the keys in cur that are not among the packed keys of snap.
func keysNotIn(cur *entryChunks, ks int, snap []byte) [][]byte {
	set := newKeySet(snap, ks)
	var out [][]byte
	for _, kb := range cur.keys {
		for off := 0; off+ks <= len(kb); off += ks {
			if !set.has(kb[off : off+ks]) {
				out = append(out, kb[off:off+ks])
			}
		}
	}
	return out
}

// count returns how many entries m holds, or -1 for types that cannot be iterated.
func (s *KernelStore) count(ctx context.Context, m *ebpf.Map, t ebpf.MapType, progress func(int64)) (int64, error) {
	if genericMapType(t) {
		c, _, err := s.dump(ctx, m, false, progress)
		if err != nil {
			return -1, err
		}
		return c.n, nil
	}
	// Per-CPU, fd-holding and other maps: count keys only, bounded by max_entries. Types
	// without keys (queue, stack, ring buffers, bloom filters) are not counted.
	if m.KeySize() == 0 {
		return -1, nil
	}
	key := make([]byte, m.KeySize())
	var n int64
	var prev any // nil: first key
	for n <= int64(m.MaxEntries()) {
		if err := ctx.Err(); err != nil {
			return -1, err
		}
		err := m.NextKey(prev, key)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return -1, nil
		}
		n++
		prev = key
	}
	return -1, nil
}

// rows reinterprets a packed byte slice as a []([size]byte) of len(b)/size elements without
// copying, which cilium/ebpf's batch calls take as they are (zero-copy marshaling).
func rows(b []byte, size int) any {
	n := len(b) / size
	typ := reflect.ArrayOf(size, reflect.TypeFor[byte]())
	if n == 0 {
		return reflect.MakeSlice(reflect.SliceOf(typ), 0, 0).Interface()
	}
	return reflect.SliceAt(typ, unsafe.Pointer(unsafe.SliceData(b)), n).Interface()
}

// dump reads every entry of a generic map. With keep, each batch gets fresh buffers that are
// returned; without, one buffer is reused and only the count is returned. The method is
// "batch", "batch-parallel" or, where the map type has no batch lookup, "iterate".
func (s *KernelStore) dump(ctx context.Context, m *ebpf.Map, keep bool, progress func(int64)) (*entryChunks, string, error) {
	ks, vs := int(m.KeySize()), int(m.ValueSize())
	out := &entryChunks{}
	if ks == 0 || vs == 0 {
		return nil, "", fmt.Errorf("key size %d, value size %d: %w", ks, vs, ErrNotGeneric)
	}
	// Parallel reads keep every entry (the overlap check needs them), so counting (Probe,
	// metadata-only) stays on one thread with one reused buffer.
	if w := s.workers(m); w > 1 && keep {
		out, err := s.dumpParallel(ctx, m, w, progress)
		switch {
		case err == nil:
			return out, "batch-parallel", nil
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, syscall.Errno(524)):
			// ENOTSUPP (524) and friends: use the library's single-threaded path below.
		default:
			return nil, "", err
		}
	}
	batch := s.batchFor(ks, vs)
	if me := int(m.MaxEntries()); me > 0 && me < batch {
		batch = me
	}
	var (
		cursor ebpf.MapBatchCursor
		kb, vb []byte
		first  = true
	)
	for {
		if err := ctx.Err(); err != nil {
			return nil, "", err
		}
		if keep || len(kb) != batch*ks {
			kb, vb = make([]byte, batch*ks), make([]byte, batch*vs)
		}
		n, err := 0, error(ebpf.ErrNotSupported)
		if !s.noBatch {
			n, err = m.BatchLookup(&cursor, rows(kb, ks), rows(vb, vs), nil)
		}
		switch {
		case errors.Is(err, unix.ENOSPC) && n == 0:
			// A hash bucket holds more entries than the batch: retry the same bucket with room.
			if batch >= 1<<24 {
				return nil, "", fmt.Errorf("batch lookup: %d entries is still too small: %w", batch, err)
			}
			batch *= 2
			kb = nil
			continue
		case first && errors.Is(err, ebpf.ErrNotSupported):
			return s.iterate(ctx, m, keep, progress)
		}
		first = false
		done := errors.Is(err, ebpf.ErrKeyNotExist)
		if err != nil && !done {
			return nil, "", fmt.Errorf("batch lookup after %d entries: %w", out.n, err)
		}
		if n > 0 {
			if keep {
				out.add(kb[:n*ks], vb[:n*vs], n)
			} else {
				out.n += int64(n)
			}
			if progress != nil {
				progress(out.n)
			}
		}
		if done {
			return out, "batch", nil
		}
	}
}

// iterate is dump for map types without batch lookup (e.g. LPM tries): get_next_key + lookup.
func (s *KernelStore) iterate(ctx context.Context, m *ebpf.Map, keep bool, progress func(int64)) (*entryChunks, string, error) {
	ks, vs := int(m.KeySize()), int(m.ValueSize())
	out := &entryChunks{}
	k, v := make([]byte, ks), make([]byte, vs)
	var kb, vb []byte
	flush := func() {
		if n := len(kb) / ks; n > 0 {
			out.add(kb, vb, n)
			kb, vb = nil, nil
		}
	}
	batch := s.batchFor(ks, vs)
	it := m.Iterate()
	var seen int64
	for it.Next(k, v) {
		seen++
		if keep {
			kb, vb = append(kb, k...), append(vb, v...)
			if len(kb) >= batch*ks {
				flush()
			}
		} else {
			out.n++
		}
		if seen%int64(batch) == 0 {
			if err := ctx.Err(); err != nil {
				return nil, "", err
			}
			if progress != nil {
				progress(seen)
			}
		}
	}
	if err := it.Err(); err != nil {
		return nil, "", fmt.Errorf("iterate after %d entries: %w", out.n, err)
	}
	flush()
	if progress != nil {
		progress(out.n)
	}
	return out, "iterate", nil
}

// update writes n packed entries in batches, falling back to one update per entry where the map
// type has no batch update. It returns how many entries were written.
func (s *KernelStore) update(ctx context.Context, m *ebpf.Map, keys, vals []byte, ks, vs int, n int64, progress Progress) (int64, error) {
	batch := int64(s.batchFor(ks, vs))
	if w := s.workers(m); w > 1 && n >= 2*batch {
		done, err := s.updateParallel(ctx, m, keys, vals, ks, vs, n, w, progress)
		if err == nil || done > 0 || !errors.Is(err, ebpf.ErrNotSupported) {
			return done, err
		}
	}
	var done int64
	report(progress, 0, n)
	for done < n {
		if err := ctx.Err(); err != nil {
			return done, fmt.Errorf("wrote %d of %d entries: %w", done, n, err)
		}
		c := min(batch, n-done)
		kb := keys[done*int64(ks) : (done+c)*int64(ks)]
		vb := vals[done*int64(vs) : (done+c)*int64(vs)]
		w, err := 0, error(ebpf.ErrNotSupported)
		if !s.noBatch {
			w, err = m.BatchUpdate(rows(kb, ks), rows(vb, vs), nil)
		}
		if errors.Is(err, ebpf.ErrNotSupported) && w == 0 {
			w, err = 0, nil
			for i := int64(0); i < c; i++ {
				if err = m.Update(kb[i*int64(ks):(i+1)*int64(ks)], vb[i*int64(vs):(i+1)*int64(vs)], ebpf.UpdateAny); err != nil {
					break
				}
				w++
			}
		}
		done += int64(w)
		if err != nil {
			if errors.Is(err, unix.E2BIG) || errors.Is(err, unix.ENOMEM) {
				err = fmt.Errorf("%w (map full?)", err)
			}
			return done, fmt.Errorf("wrote %d of %d entries: %w", done, n, err)
		}
		report(progress, done, n)
	}
	return done, nil
}

// deleteKeys deletes keys in batches. A key that vanished meanwhile (deleted by the datapath or
// evicted) is skipped. It returns how many keys this call deleted.
func (s *KernelStore) deleteKeys(ctx context.Context, m *ebpf.Map, keys [][]byte, ks int) (int64, error) {
	var deleted int64
	batch := s.batchFor(ks, 0)
	buf := make([]byte, 0, min(len(keys), batch)*ks)
	for start := 0; start < len(keys); {
		if err := ctx.Err(); err != nil {
			return deleted, err
		}
		end := min(start+batch, len(keys))
		buf = buf[:0]
		for _, k := range keys[start:end] {
			buf = append(buf, k...)
		}
		c, err := 0, error(ebpf.ErrNotSupported)
		if !s.noBatch {
			c, err = m.BatchDelete(rows(buf, ks), nil)
		}
		switch {
		case err == nil:
			deleted += int64(c)
			start = end
		case errors.Is(err, ebpf.ErrNotSupported) && c == 0:
			for _, k := range keys[start:end] {
				if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
					return deleted, err
				} else if err == nil {
					deleted++
				}
			}
			start = end
		case errors.Is(err, ebpf.ErrKeyNotExist):
			// keys[start+c] is gone already; continue after it.
			deleted += int64(c)
			start += c + 1
		default:
			return deleted + int64(c), err
		}
	}
	return deleted, nil
}

func hostByteOrder() string {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return "little"
	}
	return "big"
}
