package bpfmap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"zyvor.dev/sysbox/fluxvm/bpfmap/internal/testmap"
	"zyvor.dev/sysbox/internal/durable"
)

// storeWorld is what the conformance suite needs around a Store: a place to create, fill and
// read maps the way an apply hook and a datapath would.
type storeWorld interface {
	store() Store
	root() string
	pin() string
	create(t *testing.T, abi ABI) // replaces whatever is pinned
	fill(t *testing.T, start, n, seed uint64)
	dump(t *testing.T) map[string]string
	remove(t *testing.T)
}

// fakeWorld runs the suite against the in-memory Fake the engine's unit tests use.
type fakeWorld struct {
	f   *Fake
	abi ABI
}

func (w *fakeWorld) store() Store { return w.f }
func (w *fakeWorld) root() string { return "/sys/fs/bpf" }
func (w *fakeWorld) pin() string  { return "/sys/fs/bpf/fluxvm/conformance" }
func (w *fakeWorld) create(t *testing.T, abi ABI) {
	w.abi = abi
	if err := w.f.Create(w.pin(), abi); err != nil {
		t.Fatal(err)
	}
}
func (w *fakeWorld) fill(t *testing.T, start, n, seed uint64) {
	typ, _ := ParseType(w.abi.Type)
	for i := start; i < start+n; i++ {
		if err := w.f.Put(w.pin(), testmap.Key(typ, i, int(w.abi.KeySize)), testmap.Value(i, seed, int(w.abi.ValueSize))); err != nil {
			t.Fatal(err)
		}
	}
}
func (w *fakeWorld) dump(t *testing.T) map[string]string {
	d, err := w.f.Entries(w.pin())
	if err != nil {
		t.Fatal(err)
	}
	return d
}
func (w *fakeWorld) remove(t *testing.T) {
	if err := w.f.Remove(w.pin()); err != nil {
		t.Fatal(err)
	}
}

// kernelWorld runs the suite against real pinned maps.
type kernelWorld struct {
	s   *KernelStore
	p   string
	abi ABI
}

func (w *kernelWorld) store() Store { return w.s }
func (w *kernelWorld) root() string { return bpffsRoot }
func (w *kernelWorld) pin() string  { return w.p }
func (w *kernelWorld) create(t *testing.T, abi ABI) {
	typ, err := ParseType(abi.Type)
	if err != nil {
		t.Fatal(err)
	}
	w.abi = abi
	m, err := testmap.Create(w.p, testmap.Params{Type: typ, KeySize: abi.KeySize, ValueSize: abi.ValueSize,
		MaxEntries: abi.MaxEntries, Flags: abi.Flags}, true)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}
func (w *kernelWorld) fill(t *testing.T, start, n, seed uint64) {
	m, err := ebpf.LoadPinnedMap(w.p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := testmap.Fill(m, start, n, seed); err != nil {
		t.Fatal(err)
	}
}
func (w *kernelWorld) dump(t *testing.T) map[string]string { return dumpPin(t, w.p) }
func (w *kernelWorld) remove(t *testing.T) {
	if err := removePin(w.p); err != nil {
		t.Fatal(err)
	}
}

func removePin(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// TestConformanceFake runs the Store conformance suite against the Fake (unit tier).
func TestConformanceFake(t *testing.T) {
	runConformance(t, &fakeWorld{f: NewFake()})
}

// TestKernelConformance runs the same suite against the kernel-backed store (F19 gate).
func TestKernelConformance(t *testing.T) {
	requireDestructive(t)
	pin := setupTestPin(t, "bpfmap-conformance")
	runConformance(t, &kernelWorld{s: NewStore(WithBatchEntries(32)), p: pin})
}

// runConformance is one scenario list that every Store implementation must pass, so that the
// engine's fake-based tests mean something for the real store.
func runConformance(t *testing.T, w storeWorld) {
	ctx := context.Background()
	dir := t.TempDir()
	s := w.store()
	hash := ABI{Type: "Hash", KeySize: 8, ValueSize: 16, MaxEntries: 256}
	spec := Spec{Component: "conf", Name: "m", Pin: w.pin(), BPFFSRoot: w.root(), Policy: Merge, Declared: hash}
	entries := func(spans ...span) map[string]string { return want(ebpf.Hash, 8, 16, spans...) }
	snap := filepath.Join(dir, "m.snap")

	w.create(t, hash)
	w.fill(t, 0, 200, 1)
	info, err := s.Probe(ctx, spec)
	if err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if info.ABI != hash || info.Entries != 200 || !info.Generic || info.ID == 0 {
		t.Errorf("Probe = %+v, want %+v with 200 entries, generic, an id", info, hash)
	}
	si, err := s.Snapshot(ctx, spec, snap, nil)
	if err != nil || si.Entries != 200 || si.SHA256 == "" || si.Info.ID != info.ID {
		t.Fatalf("Snapshot = %+v, %v; want 200 entries of map %d with a sha256", si, err, info.ID)
	}

	steps := []struct {
		name     string
		recreate *ABI
		fill     []span
		policy   Policy
		snap     string
		wantErr  error
		report   func(RestoreReport) bool
		left     map[string]string
	}{
		{name: "merge into a larger map", recreate: &ABI{Type: "Hash", KeySize: 8, ValueSize: 16, MaxEntries: 512},
			fill: []span{{190, 20, 2}}, policy: Merge, snap: snap,
			report: func(r RestoreReport) bool {
				return r.Written == 200 && r.Deleted == 0 && r.Target.MaxEntries == 512 && r.Target.Entries == 210
			},
			left: entries(span{190, 20, 2}, span{0, 200, 1})},
		{name: "replace", recreate: &ABI{Type: "Hash", KeySize: 8, ValueSize: 16, MaxEntries: 512},
			fill: []span{{190, 20, 2}}, policy: Replace, snap: snap,
			report: func(r RestoreReport) bool { return r.Written == 200 && r.Deleted == 10 && r.Target.Entries == 200 },
			left:   entries(span{0, 200, 1})},
		{name: "replace into the map it came from is a no-op", policy: Replace, snap: snap,
			report: func(r RestoreReport) bool { return r.Deleted == 0 }, left: entries(span{0, 200, 1})},
		{name: "value size change", recreate: &ABI{Type: "Hash", KeySize: 8, ValueSize: 32, MaxEntries: 512},
			policy: Merge, snap: snap, wantErr: ErrABIMismatch, left: map[string]string{}},
		{name: "key size change", recreate: &ABI{Type: "Hash", KeySize: 16, ValueSize: 16, MaxEntries: 512},
			policy: Merge, snap: snap, wantErr: ErrABIMismatch, left: map[string]string{}},
		{name: "snapshot over capacity", recreate: &ABI{Type: "Hash", KeySize: 8, ValueSize: 16, MaxEntries: 100},
			fill: []span{{0, 3, 3}}, policy: Merge, snap: snap, wantErr: ErrOverCapacity, left: entries(span{0, 3, 3})},
		{name: "merge union over capacity", recreate: &ABI{Type: "Hash", KeySize: 8, ValueSize: 16, MaxEntries: 256},
			fill: []span{{1000, 60, 3}}, policy: Merge, snap: snap, wantErr: ErrOverCapacity, left: entries(span{1000, 60, 3})},
		{name: "replace makes room", recreate: &ABI{Type: "Hash", KeySize: 8, ValueSize: 16, MaxEntries: 256},
			fill: []span{{1000, 60, 3}}, policy: Replace, snap: snap,
			report: func(r RestoreReport) bool { return r.Deleted == 60 && r.Written == 200 }, left: entries(span{0, 200, 1})},
		{name: "metadata-only copies nothing", recreate: &hash, fill: []span{{5, 2, 4}}, policy: MetadataOnly, snap: snap,
			report: func(r RestoreReport) bool { return r.Skipped && r.Written == 0 }, left: entries(span{5, 2, 4})},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			if st.recreate != nil {
				w.create(t, *st.recreate)
			}
			for _, f := range st.fill {
				w.fill(t, f.start, f.n, f.seed)
			}
			sp := spec
			sp.Policy = st.policy
			rep, err := s.Restore(ctx, sp, st.snap, nil)
			switch {
			case st.wantErr != nil && !errors.Is(err, st.wantErr):
				t.Errorf("Restore: got %v, want %v", err, st.wantErr)
			case st.wantErr == nil && err != nil:
				t.Errorf("Restore: %v", err)
			case st.report != nil && !st.report(rep):
				t.Errorf("Restore report %+v does not match", rep)
			}
			checkEntries(t, st.name, w.dump(t), st.left)
		})
	}

	t.Run("policy checks at probe and snapshot", func(t *testing.T) {
		w.create(t, ABI{Type: "Array", KeySize: 4, ValueSize: 16, MaxEntries: 8})
		arr := spec
		arr.Declared = ABI{}
		arr.Policy = Replace
		if _, err := s.Probe(ctx, arr); !errors.Is(err, ErrNotDeletable) {
			t.Errorf("Probe replace on Array: got %v, want ErrNotDeletable", err)
		}
		w.create(t, ABI{Type: "PerCPUHash", KeySize: 8, ValueSize: 8, MaxEntries: 8})
		pc := spec
		pc.Declared = ABI{}
		if _, err := s.Probe(ctx, pc); !errors.Is(err, ErrNotGeneric) {
			t.Errorf("Probe merge on PerCPUHash: got %v, want ErrNotGeneric", err)
		}
		if _, err := s.Snapshot(ctx, pc, filepath.Join(dir, "pc.snap"), nil); !errors.Is(err, ErrNotGeneric) {
			t.Errorf("Snapshot merge on PerCPUHash: got %v, want ErrNotGeneric", err)
		}
		pc.Policy = MetadataOnly
		msi, err := s.Snapshot(ctx, pc, filepath.Join(dir, "pc.snap"), nil)
		if err != nil || msi.Entries != 0 || msi.Info.Generic {
			t.Errorf("metadata-only Snapshot of PerCPUHash = %+v, %v; want no entries, not generic", msi, err)
		}
		declared := spec
		declared.Declared.ValueSize = 32
		w.create(t, hash)
		if _, err := s.Probe(ctx, declared); !errors.Is(err, ErrABIMismatch) {
			t.Errorf("Probe with declared value_size 32 on a 16-byte map: got %v, want ErrABIMismatch", err)
		}
		if _, err := s.Snapshot(ctx, declared, filepath.Join(dir, "bad.snap"), nil); !errors.Is(err, ErrABIMismatch) {
			t.Errorf("Snapshot with a mismatched declared ABI: got %v, want ErrABIMismatch", err)
		}
	})

	t.Run("metadata-only snapshot cannot be replayed", func(t *testing.T) {
		w.create(t, hash)
		w.fill(t, 0, 10, 5)
		meta := spec
		meta.Policy = MetadataOnly
		ms := filepath.Join(dir, "meta.snap")
		if _, err := s.Snapshot(ctx, meta, ms, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Restore(ctx, spec, ms, nil); !errors.Is(err, ErrNoEntries) {
			t.Errorf("merge from a metadata-only snapshot: got %v, want ErrNoEntries", err)
		}
	})

	t.Run("only the expected snapshot is restored", func(t *testing.T) {
		// Another valid snapshot of the same map, taken after the datapath changed it, in place
		// of the one whose digest the engine journaled; and a symlink to the right one.
		w.create(t, hash)
		w.fill(t, 0, 200, 1)
		w.fill(t, 200, 10, 6)
		other := filepath.Join(dir, "other.snap")
		osi, err := s.Snapshot(ctx, spec, other, nil)
		if err != nil || osi.SHA256 == si.SHA256 {
			t.Fatalf("second Snapshot = %+v, %v; want another sha256 than %s", osi, err, si.SHA256)
		}
		link := filepath.Join(dir, "link.snap")
		if err := os.Symlink(snap, link); err != nil {
			t.Fatal(err)
		}
		w.create(t, hash)
		sp := spec
		sp.SnapshotSHA256 = si.SHA256
		if _, err := s.Restore(ctx, sp, other, nil); !errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(err.Error(), si.SHA256) {
			t.Errorf("Restore of another valid snapshot: got %v, want ErrCorruptSnapshot naming the expected sha256", err)
		}
		if _, err := s.Restore(ctx, sp, link, nil); !errors.Is(err, durable.ErrNotRegular) {
			t.Errorf("Restore through a symlink to the expected snapshot: got %v, want durable.ErrNotRegular", err)
		}
		if d := w.dump(t); len(d) != 0 {
			t.Fatalf("a refused restore wrote %d entries", len(d))
		}
		if rep, err := s.Restore(ctx, sp, snap, nil); err != nil || rep.Written != 200 {
			t.Fatalf("Restore of the expected snapshot = %+v, %v; want 200 written", rep, err)
		}
		checkEntries(t, "after the expected snapshot", w.dump(t), entries(span{0, 200, 1}))
	})

	t.Run("missing pin, escaping pin, corrupt snapshot", func(t *testing.T) {
		w.remove(t)
		if _, err := s.Probe(ctx, spec); !errors.Is(err, ErrMapMissing) {
			t.Errorf("Probe of a missing pin: got %v, want ErrMapMissing", err)
		}
		if _, err := s.Restore(ctx, spec, snap, nil); !errors.Is(err, ErrMapMissing) {
			t.Errorf("Restore into a missing pin: got %v, want ErrMapMissing", err)
		}
		esc := spec
		esc.Pin = w.root() + "-other/m"
		if _, err := s.Probe(ctx, esc); !errors.Is(err, ErrPinEscape) {
			t.Errorf("Probe of a pin outside the root: got %v, want ErrPinEscape", err)
		}
		w.create(t, hash)
		bad := filepath.Join(dir, "torn.snap")
		data, err := os.ReadFile(snap)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bad, data[:len(data)/2], 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Restore(ctx, spec, bad, nil); !errors.Is(err, ErrCorruptSnapshot) {
			t.Errorf("Restore from a torn snapshot: got %v, want ErrCorruptSnapshot", err)
		}
		if d := w.dump(t); len(d) != 0 {
			t.Errorf("a refused restore wrote %d entries", len(d))
		}
	})
}
