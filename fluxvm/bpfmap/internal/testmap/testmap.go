// Package testmap creates, fills and reads the explicitly named test maps that the kernel-tier
// tests and the mapctl hook program use. Entries are a pure function of (index, seed), so a test
// can check a restored map entry by entry without keeping a copy.
package testmap

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/cilium/ebpf"
)

// Key returns the key for index i: i as a little-endian integer in key size ks. For an LPM trie
// the first four bytes are the prefix length (all bits) and i follows big-endian.
func Key(t ebpf.MapType, i uint64, ks int) []byte {
	k := make([]byte, ks)
	if t == ebpf.LPMTrie {
		binary.LittleEndian.PutUint32(k, uint32((ks-4)*8))
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], i)
		copy(k[4:], b[8-min(8, ks-4):])
		return k
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], i)
	copy(k, b[:])
	return k
}

// Value returns the value for index i under seed, vs bytes long.
func Value(i, seed uint64, vs int) []byte {
	v := make([]byte, vs)
	x := i*0x9E3779B97F4A7C15 ^ seed*0xC2B2AE3D27D4EB4F ^ 0x165667B19E3779F9
	for off := 0; off < vs; off += 8 {
		x ^= x >> 33
		x *= 0xFF51AFD7ED558CCD
		x ^= x >> 29
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], x)
		copy(v[off:], b[:])
	}
	return v
}

// Params describe a test map.
type Params struct {
	Type       ebpf.MapType
	KeySize    uint32
	ValueSize  uint32
	MaxEntries uint32
	Flags      uint32
}

// Create creates a map and pins it at pin. With replace, whatever is pinned there is unpinned
// first (the old map lives on only while something holds it).
func Create(pin string, p Params, replace bool) (*ebpf.Map, error) {
	if replace {
		if err := os.Remove(pin); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("unpin %s: %w", pin, err)
		}
	}
	flags := p.Flags
	if p.Type == ebpf.LPMTrie {
		flags |= 1 // BPF_F_NO_PREALLOC, required by LPM tries
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Name: "fluxvm_test", Type: p.Type, KeySize: p.KeySize, ValueSize: p.ValueSize,
		MaxEntries: p.MaxEntries, Flags: flags,
	})
	if err != nil {
		return nil, fmt.Errorf("create %s map: %w", p.Type, err)
	}
	if err := m.Pin(pin); err != nil {
		m.Close()
		return nil, fmt.Errorf("pin %s: %w", pin, err)
	}
	return m, nil
}

// Fill writes entries start..start+n-1 under seed. Per-CPU maps get the same value on every CPU.
func Fill(m *ebpf.Map, start, n, seed uint64) error {
	ks, vs := int(m.KeySize()), int(m.ValueSize())
	for i := start; i < start+n; i++ {
		var err error
		switch m.Type() {
		case ebpf.PerCPUHash, ebpf.PerCPUArray, ebpf.LRUCPUHash:
			cpus, cerr := ebpf.PossibleCPU()
			if cerr != nil {
				return cerr
			}
			vals := make([][]byte, cpus)
			for c := range vals {
				vals[c] = Value(i, seed, vs)
			}
			err = m.Put(Key(m.Type(), i, ks), vals)
		default:
			err = m.Put(Key(m.Type(), i, ks), Value(i, seed, vs))
		}
		if err != nil {
			return fmt.Errorf("put entry %d: %w", i, err)
		}
	}
	return nil
}

// Dump returns every entry of a byte-array map as hex key -> hex value.
func Dump(m *ebpf.Map) (map[string]string, error) {
	out := map[string]string{}
	k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
	it := m.Iterate()
	for it.Next(k, v) {
		out[hex.EncodeToString(k)] = hex.EncodeToString(v)
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// Lines renders a dump as sorted "key value" lines.
func Lines(d map[string]string) []string {
	out := make([]string, 0, len(d))
	for k, v := range d {
		out = append(out, k+" "+v)
	}
	sort.Strings(out)
	return out
}
