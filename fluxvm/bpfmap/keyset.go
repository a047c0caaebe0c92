package bpfmap

import (
	"bytes"
	"hash/maphash"
	"math/bits"
)

// keySet is a set over the packed, fixed-size keys of a snapshot, without copying them: an
// open-addressing table of indexes into the packed block. Building it for a million 8-byte keys
// takes a few tens of milliseconds, several times less than a map[string]struct{}, which has to
// allocate a string per key.
type keySet struct {
	keys  []byte
	ks    int
	slots []int32 // index+1 of a key in keys, 0 = empty
	mask  uint64
	seed  maphash.Seed
}

func newKeySet(keys []byte, ks int) *keySet {
	n := len(keys) / ks
	size := uint64(1) << bits.Len64(uint64(2*n)|1)
	s := &keySet{keys: keys, ks: ks, slots: make([]int32, size), mask: size - 1, seed: maphash.MakeSeed()}
	for i := 0; i < n; i++ {
		s.insert(i)
	}
	return s
}

func (s *keySet) key(i int) []byte { return s.keys[i*s.ks : (i+1)*s.ks] }

func (s *keySet) insert(i int) {
	k := s.key(i)
	for h := maphash.Bytes(s.seed, k) & s.mask; ; h = (h + 1) & s.mask {
		j := s.slots[h]
		if j == 0 {
			s.slots[h] = int32(i + 1)
			return
		}
		if bytes.Equal(s.key(int(j-1)), k) {
			return // duplicate key in the block
		}
	}
}

func (s *keySet) has(k []byte) bool {
	for h := maphash.Bytes(s.seed, k) & s.mask; ; h = (h + 1) & s.mask {
		j := s.slots[h]
		if j == 0 {
			return false
		}
		if bytes.Equal(s.key(int(j-1)), k) {
			return true
		}
	}
}
