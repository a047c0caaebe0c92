package bpfmap

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Parallel reads of hash-family maps.
//
// A batch lookup on a hash map costs the kernel a lock/unlock and two small copy_to_user per
// bucket, about 0.3 µs per entry, so one thread reads a million entries in ~0.3 s. The cursor of
// a hash-map batch is the bucket index (a u32), which cilium/ebpf keeps opaque; here the bucket
// range [0, n_buckets) is split into segments and each worker issues BPF_MAP_LOOKUP_BATCH
// directly, starting at its segment. A worker stops after the call whose next-bucket cursor
// reaches the next segment; that last call may have read a few buckets of the next segment
// (calls copy whole buckets until the batch is full), so those entries are dropped from it when
// they reappear at the start of the following workers' output. Every bucket is still read under
// its bucket lock, exactly as in the single-threaded path.

// batchAttr is the BPF_MAP_*_BATCH member of union bpf_attr. The pointer fields are
// unsafe.Pointer (not integers) so that the garbage collector sees the buffers while the kernel
// uses them; that needs 64-bit pointers, so parallel reads are used only where uintptr is 8
// bytes (attrLayoutOK).
type batchAttr struct {
	InBatch   unsafe.Pointer
	OutBatch  unsafe.Pointer
	Keys      unsafe.Pointer
	Values    unsafe.Pointer
	Count     uint32
	MapFD     uint32
	ElemFlags uint64
	Flags     uint64
}

const attrLayoutOK = unsafe.Sizeof(batchAttr{}) == 56

// lookupBatchFrom reads up to len(keys)/ks entries starting at bucket *cursor and advances the
// cursor. It returns the entries read and whether the map end was reached.
func lookupBatchFrom(fd int, cursor *uint32, keys, vals []byte, ks int) (int, bool, error) {
	out := new(uint32)
	attr := &batchAttr{
		InBatch:  unsafe.Pointer(cursor),
		OutBatch: unsafe.Pointer(out),
		Keys:     unsafe.Pointer(unsafe.SliceData(keys)),
		Values:   unsafe.Pointer(unsafe.SliceData(vals)),
		Count:    uint32(len(keys) / ks),
		MapFD:    uint32(fd),
	}
	_, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_MAP_LOOKUP_BATCH, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	runtime.KeepAlive(attr)
	runtime.KeepAlive(keys)
	runtime.KeepAlive(vals)
	switch errno {
	case 0:
		*cursor = *out
		return int(attr.Count), false, nil
	case unix.ENOENT:
		*cursor = *out
		return int(attr.Count), true, nil
	default:
		return 0, false, errno
	}
}

// hashBuckets is the bucket count the kernel gives a hash map of maxEntries
// (roundup_pow_of_two). If a kernel differs, reads stay complete: a worker starting past the
// real end gets nothing and the worker before it reads to the end.
func hashBuckets(maxEntries uint32) uint64 {
	if maxEntries <= 1 {
		return 1
	}
	return 1 << bits.Len32(maxEntries-1)
}

func (s *KernelStore) workers(m *ebpf.Map) int {
	if s.noBatch || s.parallel < 2 || !attrLayoutOK {
		return 1
	}
	if t := m.Type(); t != ebpf.Hash && t != ebpf.LRUHash {
		return 1
	}
	w := s.parallel
	if n := int(m.MaxEntries()) / s.batchFor(int(m.KeySize()), int(m.ValueSize())); n < w {
		w = n
	}
	return max(w, 1)
}

type segment struct {
	chunks entryChunks
	err    error
}

// dumpParallel reads a hash-family map with w workers; see the comment at the top of the file.
// It always keeps the entries (the overlap check needs them); dump drops them when only
// counting.
func (s *KernelStore) dumpParallel(ctx context.Context, m *ebpf.Map, w int, progress func(int64)) (*entryChunks, error) {
	ks, vs := int(m.KeySize()), int(m.ValueSize())
	nb := hashBuckets(m.MaxEntries())
	segs := make([]segment, w)
	var (
		mu    sync.Mutex
		total int64
		wg    sync.WaitGroup
	)
	for i := 0; i < w; i++ {
		start, end := uint64(i)*nb/uint64(w), uint64(i+1)*nb/uint64(w)
		wg.Add(1)
		go func(seg *segment, start, end uint64, last bool) {
			defer wg.Done()
			cursor := uint32(start)
			batch := s.batchFor(ks, vs)
			var kb, vb []byte
			for {
				if err := ctx.Err(); err != nil {
					seg.err = err
					return
				}
				if len(kb) != batch*ks {
					kb, vb = make([]byte, batch*ks), make([]byte, batch*vs)
				}
				n, done, err := lookupBatchFrom(m.FD(), &cursor, kb, vb, ks)
				if errors.Is(err, unix.ENOSPC) {
					if batch >= 1<<24 {
						seg.err = fmt.Errorf("batch lookup: %d entries is still too small: %w", batch, err)
						return
					}
					batch *= 2
					kb = nil
					continue
				}
				if err != nil {
					seg.err = fmt.Errorf("batch lookup at bucket %d: %w", cursor, err)
					return
				}
				if n > 0 {
					// Progress counts a chunk once the next one arrives: only a worker's
					// last chunk can repeat entries, so the count never has to go back.
					if prev := len(seg.chunks.keys); prev > 0 && progress != nil {
						mu.Lock()
						total += int64(len(seg.chunks.keys[prev-1]) / ks)
						progress(total)
						mu.Unlock()
					}
					seg.chunks.add(kb[:n*ks], vb[:n*vs], n)
					kb = nil
				}
				if done || (!last && uint64(cursor) >= end) {
					return
				}
			}
		}(&segs[i], start, end, i == w-1)
	}
	wg.Wait()
	for i := range segs {
		if segs[i].err != nil {
			return nil, segs[i].err
		}
	}
	// Drop overlap: the last chunk of segment i may repeat entries that open segments i+1...
	for i := 0; i < w-1; i++ {
		dropOverlap(&segs[i].chunks, segs[i+1:], ks, vs)
	}
	out := &entryChunks{}
	for i := range segs {
		c := &segs[i].chunks
		out.keys = append(out.keys, c.keys...)
		out.vals = append(out.vals, c.vals...)
		out.n += c.n
	}
	return out, nil
}

// dropOverlap removes from the last chunk of c every key that appears among the first
// len(last chunk) entries of the following segments, where entries of buckets it overran are.
func dropOverlap(c *entryChunks, next []segment, ks, vs int) {
	if len(c.keys) == 0 {
		return
	}
	li := len(c.keys) - 1
	lk, lv := c.keys[li], c.vals[li]
	ln := len(lk) / ks
	seen := make(map[string]struct{}, ln)
	want := ln
collect:
	for _, sg := range next {
		for _, kb := range sg.chunks.keys {
			for off := 0; off+ks <= len(kb); off += ks {
				if want == 0 {
					break collect
				}
				seen[string(kb[off:off+ks])] = struct{}{}
				want--
			}
		}
	}
	if len(seen) == 0 {
		return
	}
	kept := 0
	for j := 0; j < ln; j++ {
		k := lk[j*ks : (j+1)*ks]
		if _, dup := seen[string(k)]; dup {
			continue
		}
		if kept != j {
			copy(lk[kept*ks:], k)
			copy(lv[kept*vs:], lv[j*vs:(j+1)*vs])
		}
		kept++
	}
	c.keys[li], c.vals[li] = lk[:kept*ks], lv[:kept*vs]
	c.n -= int64(ln - kept)
}

// updateParallel splits n packed entries over w goroutines, each writing its share with batch
// updates (the kernel serialises per bucket). It returns how many entries were written.
func (s *KernelStore) updateParallel(ctx context.Context, m *ebpf.Map, keys, vals []byte, ks, vs int, n int64, w int, progress Progress) (int64, error) {
	var (
		mu    sync.Mutex
		done  int64
		first error
		wg    sync.WaitGroup
	)
	report(progress, 0, n)
	per := (n + int64(w) - 1) / int64(w)
	for i := 0; i < w; i++ {
		lo, hi := int64(i)*per, min(int64(i+1)*per, n)
		if lo >= hi {
			break
		}
		wg.Add(1)
		go func(lo, hi int64) {
			defer wg.Done()
			for off := lo; off < hi; {
				if err := ctx.Err(); err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
				c := min(int64(s.batchFor(ks, vs)), hi-off)
				wn, err := m.BatchUpdate(rows(keys[off*int64(ks):(off+c)*int64(ks)], ks),
					rows(vals[off*int64(vs):(off+c)*int64(vs)], vs), nil)
				mu.Lock()
				done += int64(wn)
				if err != nil {
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
				report(progress, done, n)
				mu.Unlock()
				off += c
			}
		}(lo, hi)
	}
	wg.Wait()
	if first != nil {
		if errors.Is(first, unix.E2BIG) || errors.Is(first, unix.ENOMEM) {
			first = fmt.Errorf("%w (map full?)", first)
		}
		return done, fmt.Errorf("wrote %d of %d entries: %w", done, n, first)
	}
	return done, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
