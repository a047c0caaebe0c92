package bpfmap

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/fluxvm/bpfmap/internal/testmap"
	"zyvor.dev/sysbox/internal/testenv"
)

const (
	bpffsRoot     = "/sys/fs/bpf"
	testPinDir    = "/sys/fs/bpf/fluxvm"
	allowGateFile = "/etc/fluxvm/ALLOW_DESTRUCTIVE_E2E"
)

// requireDestructive applies the F19 gate: the real bpffs tests run only when
// FLUXVM_UPGRADE_DESTRUCTIVE_E2E=1 and /etc/fluxvm/ALLOW_DESTRUCTIVE_E2E exists. Otherwise they
// skip with that reason, and fail under SYSBOX_TEST_REQUIRE_ALL=1 (CI must enable the gate).
func requireDestructive(t *testing.T) {
	t.Helper()
	_, err := os.Stat(allowGateFile)
	testenv.Require(t, os.Getenv("FLUXVM_UPGRADE_DESTRUCTIVE_E2E") == "1" && err == nil,
		"destructive bpffs test: needs FLUXVM_UPGRADE_DESTRUCTIVE_E2E=1 and "+allowGateFile+" (F19)")
	testenv.RequireRoot(t)
}

// setupTestPin mounts bpffs at /sys/fs/bpf if nothing is mounted there, creates
// /sys/fs/bpf/fluxvm if missing, and returns the path of the one explicitly named test map,
// which is removed on exit (also on failure), together with anything else this test created.
func setupTestPin(t *testing.T, name string) string {
	t.Helper()
	ok, err := IsBPFFS(bpffsRoot)
	if err != nil {
		t.Fatalf("check %s: %v", bpffsRoot, err)
	}
	if !ok {
		if err := unix.Mount("bpf", bpffsRoot, "bpf", 0, ""); err != nil {
			t.Fatalf("mount bpffs at %s: %v", bpffsRoot, err)
		}
		// Left mounted on purpose, as scripts/test-all and systemd do: unmounting it at the end
		// would pull bpffs away from any other test or tool that started using it meanwhile.
		t.Logf("mounted bpffs at %s (left mounted)", bpffsRoot)
	}
	if _, err := os.Stat(testPinDir); errors.Is(err, os.ErrNotExist) {
		if err := os.Mkdir(testPinDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			t.Fatal(err)
		}
		// Removed only if empty: another test may be using the directory by then.
		t.Cleanup(func() { os.Remove(testPinDir) })
	}
	pin := filepath.Join(testPinDir, name)
	if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remove leftover %s: %v", pin, err)
	}
	t.Cleanup(func() {
		if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cleanup: remove %s: %v", pin, err)
		}
	})
	return pin
}

// buildMapctl builds the hook program the tests use as a component's apply/rollback hook.
func buildMapctl(t *testing.T) string {
	t.Helper()
	return testenv.BuildBinary(t, "zyvor.dev/sysbox/fluxvm/bpfmap/internal/mapctl")
}

type hook struct {
	t    *testing.T
	path string
	pin  string
}

// run runs "mapctl <cmd> -pin PIN args..." the way the engine runs a hook: an argv, no shell.
func (h hook) run(cmd string, args ...string) {
	h.t.Helper()
	argv := append([]string{cmd, "-pin", h.pin}, args...)
	out, err := exec.Command(h.path, argv...).CombinedOutput()
	if err != nil {
		h.t.Fatalf("hook mapctl %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

// want builds the expected contents: for each range [start, start+n) under seed, in order, later
// ranges overwriting earlier ones.
type span struct{ start, n, seed uint64 }

func want(t ebpf.MapType, ks, vs int, spans ...span) map[string]string {
	out := map[string]string{}
	for _, s := range spans {
		for i := s.start; i < s.start+s.n; i++ {
			out[hex.EncodeToString(testmap.Key(t, i, ks))] = hex.EncodeToString(testmap.Value(i, s.seed, vs))
		}
	}
	return out
}

func dumpPin(t *testing.T, pin string) map[string]string {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(pin, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("open %s: %v", pin, err)
	}
	defer m.Close()
	d, err := testmap.Dump(m)
	if err != nil {
		t.Fatalf("dump %s: %v", pin, err)
	}
	return d
}

// checkEntries compares a map entry by entry and reports the first differences.
func checkEntries(t *testing.T, step string, got, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: map holds %d entries, want %d", step, len(got), len(want))
	}
	bad := 0
	for k, wv := range want {
		if gv, ok := got[k]; !ok {
			t.Errorf("%s: key %s missing", step, k)
			bad++
		} else if gv != wv {
			t.Errorf("%s: key %s = %s, want %s", step, k, gv, wv)
			bad++
		}
		if bad > 5 {
			t.Fatalf("%s: more differences follow", step)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected key %s", step, k)
			if bad++; bad > 5 {
				t.Fatalf("%s: more differences follow", step)
			}
		}
	}
}

type progressLog struct{ calls [][2]int64 }

func (p *progressLog) fn(done, total int64) { p.calls = append(p.calls, [2]int64{done, total}) }

func (p *progressLog) check(t *testing.T, step string, final int64, minCalls int) {
	t.Helper()
	if len(p.calls) < minCalls {
		t.Errorf("%s: progress called %d times, want at least %d", step, len(p.calls), minCalls)
		return
	}
	for i := 1; i < len(p.calls); i++ {
		if p.calls[i][0] < p.calls[i-1][0] {
			t.Errorf("%s: progress went backwards: %v", step, p.calls)
		}
	}
	if last := p.calls[len(p.calls)-1]; last != [2]int64{final, final} {
		t.Errorf("%s: last progress %v, want [%d %d]", step, last, final, final)
	}
}

func mapID(t *testing.T, pin string) uint32 {
	t.Helper()
	m, err := ebpf.LoadPinnedMap(pin, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		t.Fatal(err)
	}
	id, _ := info.ID()
	return uint32(id)
}

// TestKernelHashUpgradeRoundTrip is the F19 round trip on a real pinned hash map: snapshot,
// an apply hook that recreates the map larger, merge and replace restores checked entry by
// entry, refusals (value size change, type change, over capacity, reboot, metadata-only
// snapshot), and a rollback that brings the old map's entries back.
func TestKernelHashUpgradeRoundTrip(t *testing.T) {
	requireDestructive(t)
	pin := setupTestPin(t, "bpfmap-kerneltest")
	h := hook{t: t, path: buildMapctl(t), pin: pin}
	ctx := context.Background()
	dir := t.TempDir()
	bootFile := filepath.Join(dir, "boot_id")
	realBoot, err := CurrentBootID()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bootFile, []byte(realBoot+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := NewStore(WithBatchEntries(64), WithBootIDPath(bootFile), WithTool("bpfmap kernel test"))
	spec := Spec{Component: "kt", Name: "ct", Pin: pin, BPFFSRoot: bpffsRoot, Policy: Merge,
		Declared: ABI{Type: "hash", KeySize: 8, ValueSize: 16, MaxEntries: 1024}}
	const ks, vs = 8, 16
	old := want(ebpf.Hash, ks, vs, span{0, 1000, 1})

	// The component's current map: 1000 entries.
	h.run("create", "-max", "1024", "-fill", "1000", "-seed", "1")
	oldID := mapID(t, pin)

	info, err := s.Probe(ctx, spec)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	wantInfo := Info{ABI: ABI{Type: "Hash", KeySize: 8, ValueSize: 16, MaxEntries: 1024}, ID: oldID, Entries: 1000,
		Generic: true, BootID: realBoot}
	if d := cmp.Diff(wantInfo, info); d != "" {
		t.Errorf("Probe info (-want +got):\n%s", d)
	}
	bad := spec
	bad.Declared.ValueSize = 32
	if _, err := s.Probe(ctx, bad); !errors.Is(err, ErrABIMismatch) || !strings.Contains(err.Error(), "value_size: declared 32, live 16") {
		t.Errorf("Probe with declared value_size 32: got %v, want ErrABIMismatch naming value_size", err)
	}
	// NoCount: the same checks and metadata, entries left uncounted.
	nc := spec
	nc.NoCount = true
	wantNC := wantInfo
	wantNC.Entries = -1
	if info, err := s.Probe(ctx, nc); err != nil {
		t.Errorf("Probe NoCount: %v", err)
	} else if d := cmp.Diff(wantNC, info); d != "" {
		t.Errorf("Probe NoCount info (-want +got):\n%s", d)
	}
	bad.NoCount = true
	if _, err := s.Probe(ctx, bad); !errors.Is(err, ErrABIMismatch) {
		t.Errorf("Probe NoCount with declared value_size 32: got %v, want ErrABIMismatch", err)
	}

	// Snapshot before apply.
	snap := filepath.Join(dir, "ct.snap")
	var pl progressLog
	si, err := s.Snapshot(ctx, spec, snap, pl.fn)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	pl.check(t, "snapshot", 1000, 3)
	if si.Entries != 1000 || si.Info.Entries != 1000 || si.Info.ID != oldID {
		t.Errorf("SnapshotInfo = %+v, want 1000 entries of map id %d", si, oldID)
	}
	vi, hdr, err := VerifySnapshot(snap)
	if err != nil {
		t.Fatalf("VerifySnapshot: %v", err)
	}
	if vi.SHA256 != si.SHA256 || hdr.Method != "batch-parallel" || hdr.BootID != realBoot || hdr.MapID != oldID || !hdr.Recorded {
		t.Errorf("snapshot header %+v sha %s; want batch-parallel method, boot %s, map id %d, recorded, sha %s",
			hdr, vi.SHA256, realBoot, oldID, si.SHA256)
	}
	if fi, err := os.Stat(snap); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("snapshot file mode: %v %v, want 0600", fi.Mode(), err)
	}
	// A batch of one entry forces ENOSPC on any bucket holding two keys; the retry must still
	// read every entry exactly once, on one thread and on several.
	for _, par := range []int{1, 2} {
		tiny := NewStore(WithBatchEntries(1), WithParallel(par), WithBootIDPath(bootFile))
		tinySnap := filepath.Join(dir, fmt.Sprintf("tiny%d.snap", par))
		if si1, err := tiny.Snapshot(ctx, spec, tinySnap, nil); err != nil || si1.Entries != 1000 {
			t.Errorf("Snapshot with batch size 1, %d threads: %d entries, %v; want 1000, nil", par, si1.Entries, err)
		}
		sd, err := ReadSnapshot(tinySnap)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for i := 0; i < sd.Len(); i++ {
			k, v := sd.Entry(i)
			got[hex.EncodeToString(k)] = hex.EncodeToString(v)
		}
		checkEntries(t, fmt.Sprintf("snapshot with batch size 1, %d threads (%s)", par, sd.Header.Method), got, old)
	}
	// A cancelled context stops a snapshot and a restore before anything is written.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	cancelled := filepath.Join(dir, "cancelled.snap")
	if _, err := s.Snapshot(cctx, spec, cancelled, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Snapshot with a cancelled context: got %v, want context.Canceled", err)
	}
	if _, err := os.Stat(cancelled); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cancelled Snapshot left a file: %v", err)
	}
	// A metadata-only snapshot records the count and no entries.
	metaSnap := filepath.Join(dir, "meta.snap")
	meta := spec
	meta.Policy = MetadataOnly
	if msi, err := s.Snapshot(ctx, meta, metaSnap, nil); err != nil || msi.Entries != 0 || msi.Info.Entries != 1000 {
		t.Errorf("metadata-only Snapshot = %+v, %v; want 0 recorded of 1000 counted", msi, err)
	}

	// Apply: the new component version recreates the map with room for more, and its datapath
	// already wrote entries 990..1009 (10 overlapping the snapshot, 10 new).
	h.run("create", "-replace", "-max", "2048", "-fill", "20", "-start", "990", "-seed", "2")
	if id := mapID(t, pin); id == oldID {
		t.Fatalf("apply hook did not recreate the map (id %d)", id)
	}

	pl = progressLog{}
	rep, err := s.Restore(ctx, spec, snap, pl.fn)
	if err != nil {
		t.Fatalf("Restore merge: %v", err)
	}
	pl.check(t, "restore", 1000, 3)
	if rep.Written != 1000 || rep.Deleted != 0 || rep.Target.MaxEntries != 2048 || rep.Target.Entries != 1010 || rep.Skipped {
		t.Errorf("merge report %+v: want written 1000, deleted 0, target max 2048 with 1010 entries", rep)
	}
	checkEntries(t, "after merge", dumpPin(t, pin), want(ebpf.Hash, ks, vs, span{990, 20, 2}, span{0, 1000, 1}))

	// Merging again is idempotent (a resumed restore may run twice).
	if _, err := s.Restore(ctx, spec, snap, nil); err != nil {
		t.Fatalf("second Restore merge: %v", err)
	}
	checkEntries(t, "after merge twice", dumpPin(t, pin), want(ebpf.Hash, ks, vs, span{990, 20, 2}, span{0, 1000, 1}))

	// Replace: the snapshot's keys exactly, new keys deleted.
	h.run("create", "-replace", "-max", "2048", "-fill", "20", "-start", "990", "-seed", "2")
	repl := spec
	repl.Policy = Replace
	rep, err = s.Restore(ctx, repl, snap, nil)
	if err != nil {
		t.Fatalf("Restore replace: %v", err)
	}
	if rep.Written != 1000 || rep.Deleted != 10 || rep.Target.Entries != 1000 {
		t.Errorf("replace report %+v: want written 1000, deleted 10, 1000 entries", rep)
	}
	checkEntries(t, "after replace", dumpPin(t, pin), old)

	// Refusals leave the target untouched.
	refusals := []struct {
		name   string
		create []string
		spec   Spec
		snap   string
		want   error
		left   map[string]string
	}{
		{"value size changed", []string{"-value", "32", "-max", "2048", "-fill", "5", "-seed", "3"}, spec, snap,
			ErrABIMismatch, want(ebpf.Hash, ks, 32, span{0, 5, 3})},
		{"type changed", []string{"-type", "lru_hash", "-max", "2048", "-fill", "5", "-seed", "3"},
			Spec{Component: "kt", Name: "ct", Pin: pin, BPFFSRoot: bpffsRoot, Policy: Merge}, snap,
			ErrABIMismatch, want(ebpf.Hash, ks, vs, span{0, 5, 3})},
		{"snapshot over capacity", []string{"-max", "512", "-fill", "3", "-seed", "3"}, spec, snap,
			ErrOverCapacity, want(ebpf.Hash, ks, vs, span{0, 3, 3})},
		{"merge union over capacity", []string{"-max", "1024", "-fill", "30", "-start", "5000", "-seed", "3"}, spec, snap,
			ErrOverCapacity, want(ebpf.Hash, ks, vs, span{5000, 30, 3})},
		{"metadata-only snapshot replayed", []string{"-max", "2048", "-fill", "2", "-seed", "3"}, spec, metaSnap,
			ErrNoEntries, want(ebpf.Hash, ks, vs, span{0, 2, 3})},
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			h.run("create", append([]string{"-replace"}, r.create...)...)
			_, err := s.Restore(ctx, r.spec, r.snap, nil)
			if !errors.Is(err, r.want) {
				t.Fatalf("Restore: got %v, want %v", err, r.want)
			}
			t.Logf("refused as expected: %v", err)
			checkEntries(t, r.name, dumpPin(t, pin), r.left)
		})
	}

	// metadata-only restore copies nothing.
	h.run("create", "-replace", "-max", "2048", "-fill", "4", "-seed", "4")
	rep, err = s.Restore(ctx, meta, snap, nil)
	if err != nil || !rep.Skipped || rep.Written != 0 {
		t.Errorf("metadata-only Restore = %+v, %v; want skipped, nothing written", rep, err)
	}
	checkEntries(t, "after metadata-only", dumpPin(t, pin), want(ebpf.Hash, ks, vs, span{0, 4, 4}))

	// A reboot between snapshot and restore: the boot id differs, so nothing is restored.
	if err := os.WriteFile(bootFile, []byte("00000000-0000-4000-8000-000000000000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(ctx, spec, snap, nil); !errors.Is(err, ErrBootChanged) {
		t.Errorf("Restore after boot change: got %v, want ErrBootChanged", err)
	}
	checkEntries(t, "after refused boot change", dumpPin(t, pin), want(ebpf.Hash, ks, vs, span{0, 4, 4}))
	if err := os.Remove(pin); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(ctx, spec, snap, nil); !errors.Is(err, ErrBootChanged) || !errors.Is(err, ErrMapMissing) {
		t.Errorf("Restore after reboot emptied bpffs: got %v, want ErrBootChanged and ErrMapMissing", err)
	}
	if err := os.WriteFile(bootFile, []byte(realBoot+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Restore(ctx, spec, snap, nil); !errors.Is(err, ErrMapMissing) || errors.Is(err, ErrBootChanged) {
		t.Errorf("Restore into a missing pin (same boot): got %v, want ErrMapMissing only", err)
	}

	// Rollback: the upgraded map holds merged state plus new entries; the rollback hook
	// recreates the old map shape, and restoring the pre-upgrade snapshot brings back exactly
	// the old entries.
	h.run("create", "-replace", "-max", "2048", "-fill", "20", "-start", "990", "-seed", "2")
	if _, err := s.Restore(ctx, spec, snap, nil); err != nil {
		t.Fatalf("upgrade merge: %v", err)
	}
	h.run("create", "-replace", "-max", "1024")
	rb := spec
	rb.Policy = Replace
	if rep, err := s.Restore(ctx, rb, snap, nil); err != nil || rep.Written != 1000 {
		t.Fatalf("rollback restore = %+v, %v; want 1000 written", rep, err)
	}
	checkEntries(t, "after rollback", dumpPin(t, pin), old)
}

// TestKernelOtherMapTypes covers the array (batch, not deletable), the LPM trie (no batch
// support: iterate fallback) and a per-CPU hash (recorded, never restored generically).
func TestKernelOtherMapTypes(t *testing.T) {
	requireDestructive(t)
	pin := setupTestPin(t, "bpfmap-kerneltest-types")
	h := hook{t: t, path: buildMapctl(t), pin: pin}
	ctx := context.Background()
	dir := t.TempDir()
	s := NewStore(WithBatchEntries(16))
	base := Spec{Component: "kt", Name: "m", Pin: pin, BPFFSRoot: bpffsRoot, Policy: Merge}

	t.Run("array merge into a larger array", func(t *testing.T) {
		h.run("create", "-replace", "-type", "array", "-key", "4", "-value", "16", "-max", "64", "-fill", "64", "-seed", "5")
		snap := filepath.Join(dir, "array.snap")
		si, err := s.Snapshot(ctx, base, snap, nil)
		if err != nil || si.Entries != 64 {
			t.Fatalf("Snapshot = %d entries, %v; want 64", si.Entries, err)
		}
		h.run("create", "-replace", "-type", "array", "-key", "4", "-value", "16", "-max", "128")
		if _, err := s.Restore(ctx, base, snap, nil); err != nil {
			t.Fatalf("Restore: %v", err)
		}
		w := want(ebpf.Array, 4, 16, span{64, 64, 0}, span{0, 64, 5})
		for i := uint64(64); i < 128; i++ { // untouched slots stay zero
			w[hex.EncodeToString(testmap.Key(ebpf.Array, i, 4))] = strings.Repeat("00", 16)
		}
		checkEntries(t, "array", dumpPin(t, pin), w)
		repl := base
		repl.Policy = Replace
		if _, err := s.Restore(ctx, repl, snap, nil); !errors.Is(err, ErrNotDeletable) {
			t.Errorf("replace on an array: got %v, want ErrNotDeletable", err)
		}
	})

	t.Run("lru restore that evicts is reported", func(t *testing.T) {
		// 1000 entries fit a 1024-entry LRU map on paper, but an LRU map evicts early
		// (free nodes cached per CPU); restore must say so rather than lose entries silently.
		h.run("create", "-replace", "-type", "lru_hash", "-max", "4096", "-fill", "1000", "-seed", "11")
		snap := filepath.Join(dir, "lru.snap")
		if si, err := s.Snapshot(ctx, base, snap, nil); err != nil || si.Entries != 1000 {
			t.Fatalf("Snapshot = %d entries, %v; want 1000", si.Entries, err)
		}
		h.run("create", "-replace", "-type", "lru_hash", "-max", "4096")
		rep, err := s.Restore(ctx, base, snap, nil)
		if err != nil || rep.Evicted != 0 {
			t.Fatalf("Restore into a roomy LRU map = %+v, %v; want no eviction", rep, err)
		}
		checkEntries(t, "lru roomy", dumpPin(t, pin), want(ebpf.Hash, 8, 16, span{0, 1000, 11}))
		h.run("create", "-replace", "-type", "lru_hash", "-max", "1000")
		rep, err = s.Restore(ctx, base, snap, nil)
		got := dumpPin(t, pin)
		switch {
		case err == nil:
			// No eviction happened after all: then every entry must be there.
			checkEntries(t, "lru tight", got, want(ebpf.Hash, 8, 16, span{0, 1000, 11}))
		case errors.Is(err, ErrOverCapacity):
			if rep.Evicted <= 0 || int64(len(got)) != 1000-rep.Evicted {
				t.Errorf("LRU eviction reported %d, map holds %d of 1000", rep.Evicted, len(got))
			}
			t.Logf("reported: %v", err)
		default:
			t.Fatalf("Restore into a tight LRU map: %v", err)
		}
	})

	t.Run("large values use smaller batches", func(t *testing.T) {
		// 64 KiB values: a batch is capped by bytes (maxBatchBytes), so this takes several
		// batches and the parallel path, with the default store.
		big := NewStore()
		if got := big.batchFor(8, 65536); got >= 512 {
			t.Fatalf("batchFor(8, 65536) = %d, want fewer than 512 entries", got)
		}
		h.run("create", "-replace", "-value", "65536", "-max", "512", "-fill", "300", "-seed", "12")
		snap := filepath.Join(dir, "big.snap")
		si, err := big.Snapshot(ctx, base, snap, nil)
		if err != nil || si.Entries != 300 {
			t.Fatalf("Snapshot = %d entries, %v; want 300", si.Entries, err)
		}
		h.run("create", "-replace", "-value", "65536", "-max", "512")
		if rep, err := big.Restore(ctx, base, snap, nil); err != nil || rep.Written != 300 {
			t.Fatalf("Restore = %+v, %v; want 300 written", rep, err)
		}
		checkEntries(t, "large values", dumpPin(t, pin), want(ebpf.Hash, 8, 65536, span{0, 300, 12}))
	})

	t.Run("hash without batch support", func(t *testing.T) {
		// Behave as on a kernel without BPF_MAP_*_BATCH: every path falls back to per-entry
		// syscalls and must give the same result.
		nb := NewStore(WithBatchEntries(16))
		nb.noBatch = true
		h.run("create", "-replace", "-max", "256", "-fill", "200", "-seed", "9")
		snap := filepath.Join(dir, "nobatch.snap")
		hash := base
		hash.Policy = Replace
		var pl progressLog
		si, err := nb.Snapshot(ctx, hash, snap, pl.fn)
		if err != nil || si.Entries != 200 {
			t.Fatalf("Snapshot = %d entries, %v; want 200", si.Entries, err)
		}
		pl.check(t, "iterate snapshot", 200, 3)
		if _, hdr, err := VerifySnapshot(snap); err != nil || hdr.Method != "iterate" {
			t.Errorf("snapshot method %q, %v; want iterate", hdr.Method, err)
		}
		h.run("create", "-replace", "-max", "256", "-fill", "40", "-start", "180", "-seed", "10")
		rep, err := nb.Restore(ctx, hash, snap, nil)
		if err != nil || rep.Written != 200 || rep.Deleted != 20 {
			t.Fatalf("Restore replace = %+v, %v; want 200 written, 20 deleted", rep, err)
		}
		checkEntries(t, "no-batch replace", dumpPin(t, pin), want(ebpf.Hash, 8, 16, span{0, 200, 9}))
	})

	t.Run("lpm trie", func(t *testing.T) {
		h.run("create", "-replace", "-type", "lpm_trie", "-key", "8", "-value", "16", "-max", "256", "-fill", "100", "-seed", "6")
		snap := filepath.Join(dir, "lpm.snap")
		si, err := s.Snapshot(ctx, base, snap, nil)
		if err != nil || si.Entries != 100 {
			t.Fatalf("Snapshot = %d entries, %v; want 100", si.Entries, err)
		}
		_, hdr, err := VerifySnapshot(snap)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("lpm trie read by %q", hdr.Method)
		h.run("create", "-replace", "-type", "lpm_trie", "-key", "8", "-value", "16", "-max", "256", "-fill", "3", "-start", "500", "-seed", "7")
		rep, err := s.Restore(ctx, base, snap, nil)
		if err != nil || rep.Written != 100 {
			t.Fatalf("Restore = %+v, %v; want 100 written", rep, err)
		}
		checkEntries(t, "lpm", dumpPin(t, pin), want(ebpf.LPMTrie, 8, 16, span{500, 3, 7}, span{0, 100, 6}))
	})

	t.Run("per-cpu hash is recorded, never restored", func(t *testing.T) {
		h.run("create", "-replace", "-type", "percpu_hash", "-key", "8", "-value", "16", "-max", "64", "-fill", "10", "-seed", "8")
		info, err := s.Probe(ctx, base)
		if !errors.Is(err, ErrNotGeneric) || !strings.Contains(err.Error(), "migration hook") {
			t.Errorf("Probe merge on PerCPUHash: got %v, want ErrNotGeneric pointing to migration hooks", err)
		}
		if info.Generic || info.Type != "PerCPUHash" || info.Entries != 10 {
			t.Errorf("Probe info %+v: want PerCPUHash, not generic, 10 entries", info)
		}
		if _, err := s.Snapshot(ctx, base, filepath.Join(dir, "pcpu.snap"), nil); !errors.Is(err, ErrNotGeneric) {
			t.Errorf("merge Snapshot on PerCPUHash: got %v, want ErrNotGeneric", err)
		}
		meta := base
		meta.Policy = MetadataOnly
		si, err := s.Snapshot(ctx, meta, filepath.Join(dir, "pcpu-meta.snap"), nil)
		if err != nil || si.Entries != 0 || si.Info.Entries != 10 || si.Info.Generic {
			t.Errorf("metadata-only Snapshot = %+v, %v; want 0 recorded, 10 counted, not generic", si, err)
		}
	})

	t.Run("symlink on bpffs leading out is refused", func(t *testing.T) {
		link := filepath.Join(testPinDir, "bpfmap-kerneltest-link-"+strconv.Itoa(os.Getpid()))
		if err := os.Symlink(filepath.Join(dir, "array.snap"), link); err != nil {
			t.Fatalf("symlink on bpffs: %v", err)
		}
		t.Cleanup(func() { os.Remove(link) })
		sp := base
		sp.Pin = link
		if _, err := s.Probe(ctx, sp); !errors.Is(err, ErrPinEscape) {
			t.Errorf("Probe through an escaping symlink: got %v, want ErrPinEscape", err)
		}
	})
}
