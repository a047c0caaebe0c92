package bpfmap

import (
	"encoding/binary"
	"testing"
)

func TestKeySet(t *testing.T) {
	for _, ks := range []int{1, 4, 8, 13} {
		n := 5000
		if ks == 1 {
			n = 200 // only 256 distinct one-byte keys
		}
		var packed []byte
		key := func(i int) []byte {
			b := make([]byte, ks)
			var x [8]byte
			binary.LittleEndian.PutUint64(x[:], uint64(i)*7)
			copy(b, x[:])
			return b
		}
		for i := 0; i < n; i++ {
			packed = append(packed, key(i)...)
		}
		packed = append(packed, key(3)...) // a duplicate is harmless
		s := newKeySet(packed, ks)
		for i := 0; i < n; i++ {
			if !s.has(key(i)) {
				t.Fatalf("key size %d: key %d missing", ks, i)
			}
		}
		misses := 0
		for i := n; i < 2*n; i++ {
			k := key(i)
			in := false
			for j := 0; j < n && ks == 1; j++ { // one-byte keys wrap around
				in = in || key(j)[0] == k[0]
			}
			if s.has(k) != in {
				misses++
			}
		}
		if misses > 0 {
			t.Errorf("key size %d: %d keys not put in the set reported wrongly", ks, misses)
		}
	}
	if s := newKeySet(nil, 8); s.has(make([]byte, 8)) {
		t.Errorf("empty set has a key")
	}
}

func BenchmarkKeySetMillion(b *testing.B) {
	packed := make([]byte, 8*1_000_000)
	for i := 0; i < 1_000_000; i++ {
		binary.LittleEndian.PutUint64(packed[i*8:], uint64(i)*0x9E3779B97F4A7C15)
	}
	for b.Loop() {
		s := newKeySet(packed, 8)
		for off := 0; off < len(packed); off += 8 {
			if !s.has(packed[off : off+8]) {
				b.Fatal("missing")
			}
		}
	}
}
