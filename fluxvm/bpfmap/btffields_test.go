package bpfmap

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

var (
	u32 = &btf.Int{Name: "u32", Size: 4}
	u64 = &btf.Int{Name: "u64", Size: 8}
)

func structOf(name string, size uint32, members ...btf.Member) *btf.Struct {
	return &btf.Struct{Name: name, Size: size, Members: members}
}

func timerStruct() *btf.Struct {
	return structOf("bpf_timer", 16, btf.Member{Name: "__opaque", Type: &btf.Array{Index: u32, Type: u64, Nelems: 2}})
}

func spinLockStruct() *btf.Struct {
	return structOf("bpf_spin_lock", 4, btf.Member{Name: "val", Type: u32})
}

func TestSpecialField(t *testing.T) {
	task := structOf("task_struct", 8)
	tests := []struct {
		name string
		typ  btf.Type
		want string // substring; "" means none
	}{
		{"plain integer", u64, ""},
		{"plain struct", structOf("ct", 16, btf.Member{Name: "a", Type: u64}, btf.Member{Name: "b", Type: u64, Offset: 64}), ""},
		{"spin lock is fine", structOf("v", 8, btf.Member{Name: "lock", Type: spinLockStruct()}, btf.Member{Name: "n", Type: u32, Offset: 32}), ""},
		{"timer", structOf("v", 24, btf.Member{Name: "n", Type: u64}, btf.Member{Name: "t", Type: timerStruct(), Offset: 64}), "t (struct bpf_timer)"},
		{"timer behind a typedef in a nested struct", structOf("v", 24, btf.Member{Name: "inner", Type: &btf.Typedef{Name: "inner_t",
			Type: structOf("in", 16, btf.Member{Name: "tm", Type: timerStruct()})}}), "inner.tm (struct bpf_timer)"},
		{"kptr", structOf("v", 8, btf.Member{Name: "task", Type: &btf.Pointer{Target: &btf.TypeTag{Value: "kptr", Type: task}}}), "task (kptr)"},
		{"list head in an array", structOf("v", 32, btf.Member{Name: "heads", Type: &btf.Array{Index: u32, Type: structOf("bpf_list_head", 16), Nelems: 2}}), "heads[] (struct bpf_list_head)"},
	}
	for _, tt := range tests {
		got := specialField(tt.typ)
		if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
			t.Errorf("%s: specialField = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestKernelValueKernelState creates maps whose BTF value types hold a bpf_timer (never restored
// generically) and a bpf_spin_lock (restored: the kernel skips the lock on copy).
func TestKernelValueKernelState(t *testing.T) {
	requireDestructive(t)
	pin := setupTestPin(t, "bpfmap-kerneltest-btf")
	ctx := context.Background()
	dir := t.TempDir()
	s := NewStore()
	spec := Spec{Component: "kt", Name: "v", Pin: pin, BPFFSRoot: bpffsRoot, Policy: Merge}
	create := func(value *btf.Struct) *ebpf.Map {
		t.Helper()
		if err := removePin(pin); err != nil {
			t.Fatal(err)
		}
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "fluxvm_btf", Type: ebpf.Hash, KeySize: 8, ValueSize: value.Size,
			MaxEntries: 16, Key: u64, Value: value})
		if err != nil {
			t.Fatalf("create map with BTF value %s: %v", value.Name, err)
		}
		if err := m.Pin(pin); err != nil {
			m.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		return m
	}

	t.Run("timer", func(t *testing.T) {
		m := create(structOf("ct_timer", 24, btf.Member{Name: "n", Type: u64}, btf.Member{Name: "expiry", Type: timerStruct(), Offset: 64}))
		if err := m.Put(uint64(1), make([]byte, 24)); err != nil {
			t.Fatal(err)
		}
		info, err := s.Probe(ctx, spec)
		if !errors.Is(err, ErrNotGeneric) || !strings.Contains(err.Error(), "bpf_timer") {
			t.Errorf("Probe merge: got %v, want ErrNotGeneric naming bpf_timer", err)
		}
		if info.Generic || !strings.Contains(info.NonGeneric, "expiry") {
			t.Errorf("Probe info %+v: want not generic, naming the expiry field", info)
		}
		if _, err := s.Snapshot(ctx, spec, filepath.Join(dir, "timer.snap"), nil); !errors.Is(err, ErrNotGeneric) {
			t.Errorf("Snapshot merge: got %v, want ErrNotGeneric", err)
		}
		meta := spec
		meta.Policy = MetadataOnly
		if si, err := s.Snapshot(ctx, meta, filepath.Join(dir, "timer-meta.snap"), nil); err != nil || si.Info.Entries != 1 {
			t.Errorf("metadata-only Snapshot = %+v, %v; want 1 entry counted", si, err)
		}
	})

	t.Run("spin lock", func(t *testing.T) {
		value := structOf("ct_locked", 16, btf.Member{Name: "lock", Type: spinLockStruct()}, btf.Member{Name: "n", Type: u64, Offset: 64})
		m := create(value)
		for i := uint64(0); i < 10; i++ {
			v := make([]byte, 16)
			v[8] = byte(i + 100)
			if err := m.Put(i, v); err != nil {
				t.Fatal(err)
			}
		}
		snap := filepath.Join(dir, "lock.snap")
		if si, err := s.Snapshot(ctx, spec, snap, nil); err != nil || si.Entries != 10 || !si.Info.Generic {
			t.Fatalf("Snapshot = %+v, %v; want 10 entries of a generic map", si, err)
		}
		m2 := create(value)
		if rep, err := s.Restore(ctx, spec, snap, nil); err != nil || rep.Written != 10 {
			t.Fatalf("Restore = %+v, %v; want 10 written", rep, err)
		}
		for i := uint64(0); i < 10; i++ {
			v := make([]byte, 16)
			if err := m2.Lookup(i, v); err != nil || v[8] != byte(i+100) {
				t.Errorf("restored key %d: value %v, %v; want n=%d", i, v, err, i+100)
			}
		}
	})
}
