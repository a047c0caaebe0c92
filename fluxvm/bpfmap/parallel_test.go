package bpfmap

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
)

func keysOf(vals ...uint16) []byte {
	var b []byte
	for _, v := range vals {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func chunksOf(ks int, batches ...[]uint16) entryChunks {
	var c entryChunks
	for _, b := range batches {
		k := keysOf(b...)
		v := make([]byte, len(b)) // 1-byte values: the low byte of the key
		for i, x := range b {
			v[i] = byte(x)
		}
		c.add(k, v, len(b))
	}
	return c
}

func flatKeys(c entryChunks) []uint16 {
	var out []uint16
	for _, k := range c.keys {
		for off := 0; off < len(k); off += 2 {
			out = append(out, binary.LittleEndian.Uint16(k[off:]))
		}
	}
	return out
}

func TestDropOverlap(t *testing.T) {
	tests := []struct {
		name string
		seg  [][]uint16   // batches of the segment being trimmed
		next [][][]uint16 // following segments' batches
		want []uint16
	}{
		{"no overlap", [][]uint16{{1, 2}, {3, 4}}, [][][]uint16{{{5, 6}}}, []uint16{1, 2, 3, 4}},
		{"tail repeats next head", [][]uint16{{1, 2}, {3, 4, 5}}, [][][]uint16{{{4, 5, 6}}}, []uint16{1, 2, 3}},
		{"overran an empty segment into the one after", [][]uint16{{1, 2, 3, 7, 8}}, [][][]uint16{{}, {{7, 8, 9}}}, []uint16{1, 2, 3}},
		{"overran two segments", [][]uint16{{1, 5, 7}}, [][][]uint16{{{5}}, {{7, 8}}}, []uint16{1}},
		{"everything is overlap", [][]uint16{{4, 5}}, [][][]uint16{{{4, 5, 6}}}, nil},
		{"earlier batches are never trimmed", [][]uint16{{4, 5}, {9}}, [][][]uint16{{{4, 5, 6}}}, []uint16{4, 5, 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := chunksOf(2, tt.seg...)
			var next []segment
			for _, n := range tt.next {
				next = append(next, segment{chunks: chunksOf(2, n...)})
			}
			dropOverlap(&c, next, 2, 1)
			got := flatKeys(c)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || c.n != int64(len(tt.want)) {
				t.Errorf("got keys %v (n=%d), want %v", got, c.n, tt.want)
			}
			// values follow their keys
			for i, k := range c.keys {
				for off := 0; off < len(k); off += 2 {
					if c.vals[i][off/2] != k[off] {
						t.Errorf("value of key %d moved away from it", binary.LittleEndian.Uint16(k[off:]))
					}
				}
			}
		})
	}
}

func TestHashBuckets(t *testing.T) {
	for _, tt := range []struct {
		max  uint32
		want uint64
	}{{0, 1}, {1, 1}, {2, 2}, {3, 4}, {1024, 1024}, {1000000, 1 << 20}} {
		if got := hashBuckets(tt.max); got != tt.want {
			t.Errorf("hashBuckets(%d) = %d, want %d", tt.max, got, tt.want)
		}
	}
}

// TestKernelParallelDumpExact reads hash maps of many fill levels with several workers and small
// batches (so that workers overrun segment boundaries, also across empty segments) and checks that
// every key is read exactly once with its value.
func TestKernelParallelDumpExact(t *testing.T) {
	requireDestructive(t)
	ctx := context.Background()
	for _, typ := range []ebpf.MapType{ebpf.Hash, ebpf.LRUHash} {
		for _, fill := range []int{0, 1, 7, 100, 1000, 3000, 4096} {
			for _, w := range []int{2, 3, 4} {
				t.Run(fmt.Sprintf("%s/%d entries/%d workers", typ, fill, w), func(t *testing.T) {
					m, err := ebpf.NewMap(&ebpf.MapSpec{Type: typ, KeySize: 8, ValueSize: 8, MaxEntries: 4096})
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					for i := 0; i < fill; i++ {
						if err := m.Put(uint64(i)*2654435761, uint64(i)); err != nil {
							t.Fatal(err)
						}
					}
					// The reference: what a plain get_next_key walk sees (an LRU map may have
					// evicted some of what was put).
					want := map[uint64]uint64{}
					var k, v uint64
					it := m.Iterate()
					for it.Next(&k, &v) {
						want[k] = v
					}
					if err := it.Err(); err != nil {
						t.Fatal(err)
					}
					if typ == ebpf.Hash && len(want) != fill {
						t.Fatalf("hash map holds %d entries after %d puts", len(want), fill)
					}
					s := NewStore(WithBatchEntries(32), WithParallel(w))
					if got := s.workers(m); got != w {
						t.Fatalf("workers = %d, want %d", got, w)
					}
					var last int64
					c, err := s.dumpParallel(ctx, m, w, func(n int64) { last = n })
					if err != nil {
						t.Fatal(err)
					}
					seen := map[uint64]bool{}
					for i, kb := range c.keys {
						for off := 0; off < len(kb); off += 8 {
							k := binary.NativeEndian.Uint64(kb[off:])
							v := binary.NativeEndian.Uint64(c.vals[i][off:])
							if seen[k] {
								t.Errorf("key %d read twice", k)
							}
							seen[k] = true
							if wv, ok := want[k]; !ok || wv != v {
								t.Errorf("key %d has value %d, want %d (present %v)", k, v, wv, ok)
							}
						}
					}
					if len(seen) != len(want) || c.n != int64(len(want)) {
						t.Errorf("read %d distinct keys, n=%d; want %d", len(seen), c.n, len(want))
					}
					if last > int64(len(want)) {
						t.Errorf("progress reported %d, more than the %d entries", last, len(want))
					}
				})
			}
		}
	}
}
