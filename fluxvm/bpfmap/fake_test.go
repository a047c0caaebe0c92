package bpfmap

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func fakeWith(t *testing.T, root string, abi ABI, entries map[string]string) (*Fake, Spec) {
	t.Helper()
	f := NewFake()
	pin := filepath.Join(root, "c", "m")
	if err := f.Create(pin, abi); err != nil {
		t.Fatal(err)
	}
	for k, v := range entries {
		if err := f.Put(pin, []byte(k), []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	return f, Spec{Component: "c", Name: "m", Pin: pin, BPFFSRoot: root, Policy: Merge}
}

var hash2 = ABI{Type: "Hash", KeySize: 1, ValueSize: 1, MaxEntries: 4}

func TestFakeProbe(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name    string
		abi     ABI
		spec    func(s Spec) Spec
		wantErr error
	}{
		{"ok", hash2, func(s Spec) Spec { return s }, nil},
		{"declared type differs", hash2, func(s Spec) Spec { s.Declared.Type = "LRUHash"; return s }, ErrABIMismatch},
		{"declared type in kernel spelling", hash2, func(s Spec) Spec { s.Declared.Type = "hash"; return s }, nil},
		{"declared value size differs", hash2, func(s Spec) Spec { s.Declared.ValueSize = 8; return s }, ErrABIMismatch},
		{"merge on per-CPU", ABI{Type: "PerCPUHash", KeySize: 1, ValueSize: 1, MaxEntries: 4}, func(s Spec) Spec { return s }, ErrNotGeneric},
		{"metadata-only on per-CPU", ABI{Type: "PerCPUHash", KeySize: 1, ValueSize: 1, MaxEntries: 4}, func(s Spec) Spec { s.Policy = MetadataOnly; return s }, nil},
		{"replace on array", ABI{Type: "Array", KeySize: 1, ValueSize: 1, MaxEntries: 4}, func(s Spec) Spec { s.Policy = Replace; return s }, ErrNotDeletable},
		{"pin outside root", hash2, func(s Spec) Spec { s.BPFFSRoot = filepath.Join(root, "elsewhere"); return s }, ErrPinEscape},
		{"missing pin", hash2, func(s Spec) Spec { s.Pin = filepath.Join(root, "c", "nope"); return s }, ErrMapMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, spec := fakeWith(t, root, tt.abi, map[string]string{"a": "1", "b": "2"})
			info, err := f.Probe(context.Background(), tt.spec(spec))
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if err == nil && info.Entries != 2 {
				t.Errorf("entries: got %d, want 2", info.Entries)
			}
		})
	}
}

func TestFakeSnapshotRestore(t *testing.T) {
	root := t.TempDir()
	tests := []struct {
		name    string
		policy  Policy
		target  ABI
		after   map[string]string // entries in the replacement map before restore
		want    map[string]string
		wantErr error
		wantRep RestoreReport
	}{
		{"merge keeps new keys", Merge, hash2, map[string]string{"c": "3", "a": "9"},
			map[string]string{"a": "1", "b": "2", "c": "3"}, nil, RestoreReport{Policy: Merge, Written: 2}},
		{"replace drops new keys", Replace, hash2, map[string]string{"c": "3", "a": "9"},
			map[string]string{"a": "1", "b": "2"}, nil, RestoreReport{Policy: Replace, Written: 2, Deleted: 1}},
		{"metadata-only copies nothing", MetadataOnly, hash2, map[string]string{"c": "3"},
			map[string]string{"c": "3"}, nil, RestoreReport{Policy: MetadataOnly, Skipped: true}},
		{"value size changed", Merge, ABI{Type: "Hash", KeySize: 1, ValueSize: 2, MaxEntries: 4}, nil, nil, ErrABIMismatch, RestoreReport{}},
		{"key size changed", Merge, ABI{Type: "Hash", KeySize: 2, ValueSize: 1, MaxEntries: 4}, nil, nil, ErrABIMismatch, RestoreReport{}},
		{"type changed", Merge, ABI{Type: "LRUHash", KeySize: 1, ValueSize: 1, MaxEntries: 4}, nil, nil, ErrABIMismatch, RestoreReport{}},
		{"snapshot too big", Merge, ABI{Type: "Hash", KeySize: 1, ValueSize: 1, MaxEntries: 1}, nil, nil, ErrOverCapacity, RestoreReport{}},
		{"merge union too big", Merge, ABI{Type: "Hash", KeySize: 1, ValueSize: 1, MaxEntries: 2}, map[string]string{"c": "3"}, nil, ErrOverCapacity, RestoreReport{}},
		{"max entries may grow", Merge, ABI{Type: "Hash", KeySize: 1, ValueSize: 1, MaxEntries: 100}, nil,
			map[string]string{"a": "1", "b": "2"}, nil, RestoreReport{Policy: Merge, Written: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, spec := fakeWith(t, root, hash2, map[string]string{"a": "1", "b": "2"})
			spec.Policy = tt.policy
			snap := filepath.Join(t.TempDir(), "m.snap")
			si, err := f.Snapshot(context.Background(), spec, snap, nil)
			if err != nil {
				t.Fatal(err)
			}
			wantSnapEntries := int64(2)
			if tt.policy == MetadataOnly {
				wantSnapEntries = 0
			}
			if si.Entries != wantSnapEntries || si.SHA256 == "" {
				t.Errorf("snapshot info: got %+v", si)
			}
			// the apply hook recreates the map (new id, empty), maybe with another shape
			if err := f.Create(spec.Pin, tt.target); err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.after {
				if err := f.Put(spec.Pin, []byte(k), []byte(v)); err != nil {
					t.Fatal(err)
				}
			}
			rep, err := f.Restore(context.Background(), spec, snap, nil)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			rep.Target = Info{}
			if diff := cmp.Diff(tt.wantRep, rep); diff != "" {
				t.Errorf("report (-want +got):\n%s", diff)
			}
			got, _ := f.Entries(spec.Pin)
			want := map[string]string{}
			for k, v := range tt.want {
				want[hexs(k)] = hexs(v)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			// restore is idempotent: a crash mid-restore is repaired by running it again
			if _, err := f.Restore(context.Background(), spec, snap, nil); err != nil {
				t.Errorf("second restore: %v", err)
			}
			again, _ := f.Entries(spec.Pin)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("second restore changed entries (-first +second):\n%s", diff)
			}
		})
	}
}

func hexs(s string) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, digits[s[i]>>4], digits[s[i]&15])
	}
	return string(out)
}

func TestFakeCorruptSnapshotAndFailures(t *testing.T) {
	root := t.TempDir()
	f, spec := fakeWith(t, root, hash2, map[string]string{"a": "1"})
	snap := filepath.Join(t.TempDir(), "m.snap")
	if _, err := f.Snapshot(context.Background(), spec, snap, nil); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(snap)
	b[len(b)/2] ^= 1
	os.WriteFile(snap, b, 0o600)
	if _, err := f.Restore(context.Background(), spec, snap, nil); !errors.Is(err, ErrCorruptSnapshot) {
		t.Errorf("corrupt snapshot: got %v, want ErrCorruptSnapshot", err)
	}
	boom := errors.New("boom")
	f.FailOn("snapshot", spec.Pin, boom)
	if _, err := f.Snapshot(context.Background(), spec, snap, nil); !errors.Is(err, boom) {
		t.Errorf("injected failure: got %v, want boom", err)
	}
	if _, err := f.Snapshot(context.Background(), spec, snap, nil); err != nil {
		t.Errorf("failure is one-shot: got %v", err)
	}
	// the kernel refuses a new key in a full map
	full, fspec := fakeWith(t, root, ABI{Type: "Hash", KeySize: 1, ValueSize: 1, MaxEntries: 1}, map[string]string{"a": "1"})
	if err := full.Put(fspec.Pin, []byte("b"), []byte("2")); !errors.Is(err, ErrOverCapacity) {
		t.Errorf("put into full map: got %v, want ErrOverCapacity", err)
	}
}

func TestFakeFilePersistence(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fake.json")
	a, err := NewFakeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pin := "/sys/fs/bpf/x/m"
	if err := a.Create(pin, hash2); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(pin, []byte("k"), []byte("v")); err != nil {
		t.Fatal(err)
	}
	b, err := NewFakeFile(path) // another process
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Entries(pin)
	if err != nil || got[hexs("k")] != hexs("v") {
		t.Fatalf("second store: got %v %v", got, err)
	}
	if err := b.Put(pin, []byte("l"), []byte("w")); err != nil {
		t.Fatal(err)
	}
	got, _ = a.Entries(pin) // a re-reads the file
	if len(got) != 2 {
		t.Errorf("first store after second wrote: got %v, want 2 entries", got)
	}
	m1, _ := a.Map(pin)
	if err := a.Create(pin, hash2); err != nil {
		t.Fatal(err)
	}
	m2, _ := a.Map(pin)
	if m1.ID == m2.ID || len(m2.Entries) != 0 {
		t.Errorf("recreate: got id %d -> %d, %d entries; want a new id and no entries", m1.ID, m2.ID, len(m2.Entries))
	}
	os.WriteFile(path, []byte("{garbage"), 0o600)
	if _, err := NewFakeFile(path); err == nil {
		t.Errorf("corrupt fake state: got nil error")
	}
}
