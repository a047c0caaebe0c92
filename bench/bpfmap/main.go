// Command bpfmap-bench times fluxvm-upgrade's pinned-map snapshot and restore on a real hash map
// (8-byte keys, 16-byte values, 1,000,000 entries by default) and, in the same run, `bpftool -j
// map dump` of the same map, and prints the ratio. Needs root and bpffs; run it via run.sh.
//
// It creates one map pinned at /sys/fs/bpf/fluxvm-bench/hash (by default) and removes the pin and
// the directory on exit, also on error or Ctrl-C.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/cilium/ebpf"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
)

type result struct {
	Entries           int     `json:"entries"`
	KeySize           int     `json:"key_size"`
	ValueSize         int     `json:"value_size"`
	Runs              int     `json:"runs"`
	Parallel          int     `json:"parallel"`
	SnapshotBestS     float64 `json:"snapshot_best_s"`
	SnapshotMedianS   float64 `json:"snapshot_median_s"`
	SnapshotBytes     int64   `json:"snapshot_bytes"`
	RestoreBestS      float64 `json:"restore_best_s"`
	RestoreMedianS    float64 `json:"restore_median_s"`
	ReplaceFullBestS  float64 `json:"replace_full_best_s"`
	BpftoolDumpBestS  float64 `json:"bpftool_dump_best_s"`
	BpftoolDumpBytes  int64   `json:"bpftool_dump_bytes"`
	SnapshotSpeedup   float64 `json:"snapshot_speedup_vs_bpftool"`
	RestoreSpeedupVsB float64 `json:"restore_vs_bpftool_dump"`
}

func main() {
	entries := flag.Int("entries", 1_000_000, "entries in the hash map")
	runs := flag.Int("runs", 3, "timed runs of each operation (best and median are reported)")
	root := flag.String("bpffs", "/sys/fs/bpf", "bpffs mount")
	dir := flag.String("dir", "", "directory for snapshot files (default: a new temp dir)")
	bpftool := flag.String("bpftool", "bpftool", "bpftool binary")
	jsonOut := flag.Bool("json", false, "print the result as JSON")
	parallel := flag.Int("parallel", 0, "threads for snapshot/restore (0: the store's default)")
	fluxvm := flag.String("fluxvm", "", "time whole `run`s of this fluxvm-upgrade binary instead (see run.go)")
	fluxvmBase := flag.String("fluxvm-base", "", "with -fluxvm: also time this (older) build, alternating with it")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := run(ctx, *entries, *runs, *root, *dir, *bpftool, *parallel, *fluxvm, *fluxvmBase)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bpfmap-bench:", err)
		os.Exit(1)
	}
	if res == nil { // -fluxvm printed its lines
		return
	}
	if *jsonOut {
		json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	fmt.Printf("hash map: %d entries, key %d B, value %d B; %d runs each, best (median)\n",
		res.Entries, res.KeySize, res.ValueSize, res.Runs)
	fmt.Printf("  snapshot (fluxvm, batch + sha256 + fsync):  %.3f s (%.3f s), file %.1f MB\n",
		res.SnapshotBestS, res.SnapshotMedianS, float64(res.SnapshotBytes)/1e6)
	fmt.Printf("  restore merge into a fresh map:              %.3f s (%.3f s)\n", res.RestoreBestS, res.RestoreMedianS)
	fmt.Printf("  restore replace into a full map:             %.3f s\n", res.ReplaceFullBestS)
	fmt.Printf("  bpftool -j map dump:                         %.3f s, output %.1f MB\n",
		res.BpftoolDumpBestS, float64(res.BpftoolDumpBytes)/1e6)
	fmt.Printf("  snapshot speed-up vs bpftool dump:           %.1fx\n", res.SnapshotSpeedup)
	fmt.Printf("  restore speed-up vs bpftool dump:            %.1fx\n", res.RestoreSpeedupVsB)
}

const keySize, valueSize = 8, 16

func run(ctx context.Context, n, runs int, root, dir, bpftool string, parallel int, fluxvm, fluxvmBase string) (*result, error) {
	if ok, err := bpfmap.IsBPFFS(root); err != nil || !ok {
		return nil, fmt.Errorf("%s is not a mounted bpffs (mount -t bpf bpf %s): %v", root, root, err)
	}
	if _, err := exec.LookPath(bpftool); err != nil {
		return nil, fmt.Errorf("bpftool not found (apt-get install bpftool): %w", err)
	}
	pinDir := filepath.Join(root, "fluxvm-bench")
	if err := os.Mkdir(pinDir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	pin := filepath.Join(pinDir, "hash")
	defer os.Remove(pinDir)
	defer os.Remove(pin)
	if dir == "" {
		d, err := os.MkdirTemp("", "bpfmap-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}

	opts := []bpfmap.Option{bpfmap.WithTool("bpfmap-bench")}
	if parallel > 0 {
		opts = append(opts, bpfmap.WithParallel(parallel))
	}
	b := &bench{n: n, runs: runs, pin: pin, bpftool: bpftool, snap: filepath.Join(dir, "hash.snap"),
		keys: make([]uint64, n), vals: make([][2]uint64, n), store: bpfmap.NewStore(opts...),
		spec: bpfmap.Spec{Component: "bench", Name: "hash", Pin: pin, BPFFSRoot: root, Policy: bpfmap.Merge,
			Declared: bpfmap.ABI{Type: "Hash", KeySize: keySize, ValueSize: valueSize}}}
	for i := range b.keys {
		b.keys[i] = uint64(i)*0x9E3779B97F4A7C15 + 1
		b.vals[i] = [2]uint64{uint64(i), b.keys[i] ^ 0xDEADBEEF}
	}
	res := &result{Entries: n, KeySize: keySize, ValueSize: valueSize, Runs: runs, Parallel: parallel}

	m, err := b.create(true)
	if err != nil {
		return nil, err
	}
	if fluxvm != "" {
		m.Close()
		return nil, b.timeFluxvmRun(ctx, fluxvm, fluxvmBase, root, dir)
	}
	snapT, err := b.timeSnapshot(ctx, res)
	if err != nil {
		return nil, err
	}
	dumpT, err := b.timeBpftoolDump(ctx, res)
	if err != nil {
		return nil, err
	}
	replT, err := b.timeReplaceFull(ctx)
	if err != nil {
		return nil, err
	}
	m.Close()
	restT, err := b.timeMergeFresh(ctx)
	if err != nil {
		return nil, err
	}

	res.SnapshotBestS, res.SnapshotMedianS = best(snapT), median(snapT)
	res.RestoreBestS, res.RestoreMedianS = best(restT), median(restT)
	res.ReplaceFullBestS = best(replT)
	res.BpftoolDumpBestS = best(dumpT)
	res.SnapshotSpeedup = res.BpftoolDumpBestS / res.SnapshotBestS
	res.RestoreSpeedupVsB = res.BpftoolDumpBestS / res.RestoreBestS
	return res, nil
}

// bench is one run's map, entries, store and snapshot file.
type bench struct {
	n, runs            int
	pin, bpftool, snap string
	keys               []uint64
	vals               [][2]uint64
	store              *bpfmap.KernelStore
	spec               bpfmap.Spec // merge
}

// create (re)creates the hash map at the pin, filled with every entry when fill is set.
func (b *bench) create(fill bool) (*ebpf.Map, error) {
	os.Remove(b.pin)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "fluxvm_bench", Type: ebpf.Hash, KeySize: keySize,
		ValueSize: valueSize, MaxEntries: uint32(b.n)})
	if err != nil {
		return nil, fmt.Errorf("create map: %w", err)
	}
	if err := m.Pin(b.pin); err != nil {
		m.Close()
		return nil, err
	}
	if fill {
		if c, err := m.BatchUpdate(b.keys, b.vals, nil); err != nil || c != b.n {
			m.Close()
			return nil, fmt.Errorf("fill: %d of %d: %w", c, b.n, err)
		}
	}
	return m, nil
}

// timeSnapshot snapshots the full map runs times, recording the file's size in res.
func (b *bench) timeSnapshot(ctx context.Context, res *result) ([]time.Duration, error) {
	var ts []time.Duration
	for r := 0; r < b.runs; r++ {
		t0 := time.Now()
		si, err := b.store.Snapshot(ctx, b.spec, b.snap, nil)
		if err != nil {
			return nil, err
		}
		ts = append(ts, time.Since(t0))
		if si.Entries != int64(b.n) {
			return nil, fmt.Errorf("snapshot holds %d entries, want %d", si.Entries, b.n)
		}
	}
	if fi, err := os.Stat(b.snap); err == nil {
		res.SnapshotBytes = fi.Size()
	}
	return ts, nil
}

// timeBpftoolDump runs `bpftool -j map dump` on the same, full map runs times, recording the
// output's size in res.
func (b *bench) timeBpftoolDump(ctx context.Context, res *result) ([]time.Duration, error) {
	var ts []time.Duration
	for r := 0; r < b.runs; r++ {
		cmd := exec.CommandContext(ctx, b.bpftool, "-j", "map", "dump", "pinned", b.pin)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		nb, _ := io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil {
			return nil, fmt.Errorf("bpftool map dump: %w", err)
		}
		ts = append(ts, time.Since(t0))
		res.BpftoolDumpBytes = nb
	}
	return ts, nil
}

// timeReplaceFull restores with replace into the map that still holds all n keys (worst case
// for replace: every current key is looked up in the snapshot's key set).
func (b *bench) timeReplaceFull(ctx context.Context) ([]time.Duration, error) {
	var ts []time.Duration
	repl := b.spec
	repl.Policy = bpfmap.Replace
	for r := 0; r < b.runs; r++ {
		t0 := time.Now()
		rep, err := b.store.Restore(ctx, repl, b.snap, nil)
		if err != nil {
			return nil, err
		}
		ts = append(ts, time.Since(t0))
		if rep.Written != int64(b.n) || rep.Deleted != 0 {
			return nil, fmt.Errorf("replace wrote %d deleted %d, want %d and 0", rep.Written, rep.Deleted, b.n)
		}
	}
	return ts, nil
}

// timeMergeFresh restores with merge into a freshly recreated, empty map (what an upgrade
// does after apply), checking every entry each time.
func (b *bench) timeMergeFresh(ctx context.Context) ([]time.Duration, error) {
	var ts []time.Duration
	for r := 0; r < b.runs; r++ {
		m, err := b.create(false)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		rep, err := b.store.Restore(ctx, b.spec, b.snap, nil)
		if err != nil {
			m.Close()
			return nil, err
		}
		ts = append(ts, time.Since(t0))
		err = verify(m, b.keys, b.vals, rep.Written)
		m.Close()
		if err != nil {
			return nil, err
		}
	}
	return ts, nil
}

// verify checks the restored map holds every entry (a sample of values, all keys by count).
func verify(m *ebpf.Map, keys []uint64, vals [][2]uint64, written int64) error {
	if written != int64(len(keys)) {
		return fmt.Errorf("restore wrote %d entries, want %d", written, len(keys))
	}
	var v [16]byte
	for i := 0; i < len(keys); i += 997 {
		if err := m.Lookup(keys[i], v[:]); err != nil {
			return fmt.Errorf("restored map: key %d: %w", i, err)
		}
		if binary.NativeEndian.Uint64(v[:8]) != vals[i][0] || binary.NativeEndian.Uint64(v[8:]) != vals[i][1] {
			return fmt.Errorf("restored map: key %d has a wrong value", i)
		}
	}
	var count int
	var k [8]byte
	it := m.Iterate()
	for it.Next(k[:], v[:]) {
		count++
	}
	if err := it.Err(); err != nil {
		return err
	}
	if count != len(keys) {
		return fmt.Errorf("restored map holds %d entries, want %d", count, len(keys))
	}
	return nil
}

func best(d []time.Duration) float64 { return slices.Min(d).Seconds() }

func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2].Seconds()
}
