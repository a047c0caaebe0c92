package executor

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
)

// schedule runs fn for each item once every item it waits for has finished, at most as many at
// a time as its pool holds; an item whose prerequisite failed, or that has not started when the
// run became unfinishable, is skipped (skip is called with the reason). A prerequisite that is
// not among items is not waited for (it does not run in this walk); if it failed, the item is
// skipped.
//
// When a pool has room and several of its items are ready, they start in dispatch order (see
// dispatchKeys): first the items that let a waiter with few prerequisites go, so that in a
// destroy one network's nodes are all removed before the next network's and its bridge goes
// while the other nodes are still being removed, instead of every network waiting for the
// last node.
func (r *run) schedule(ctx context.Context, items []int, after map[int][]int, name func(int) string, pool func(int) chan struct{}, failed func(int) bool, fn func(int), skip func(i int, reason error)) {
	if len(items) == 0 {
		return
	}
	pos := make(map[int]int, len(items))
	for k, i := range items {
		pos[i] = k
	}
	deps := make(map[int][]int, len(items))    // prerequisites among items, each once
	waiters := make(map[int][]int, len(items)) // the items waiting for each item
	for _, i := range items {
		for _, j := range after[i] {
			if _, ok := pos[j]; !ok || j == i || slices.Contains(deps[i], j) {
				continue
			}
			deps[i] = append(deps[i], j)
			waiters[j] = append(waiters[j], i)
		}
	}
	keys := dispatchKeys(items, deps, waiters)
	s := &scheduler{
		r: r, ctx: ctx, after: after, name: name, pool: pool, failed: failed, fn: fn, skip: skip,
		waiters: waiters, keys: keys, left: make(map[int]int, len(items)), ready: map[chan struct{}][]int{},
	}
	s.mu.Lock()
	for _, i := range items {
		s.left[i] = len(deps[i])
	}
	for _, i := range items {
		if s.left[i] == 0 {
			s.readyLocked(i)
		}
	}
	s.dispatchLocked()
	s.mu.Unlock()
	s.wg.Wait()
}

// scheduler is one schedule call's bookkeeping.
type scheduler struct {
	r       *run
	ctx     context.Context
	after   map[int][]int
	name    func(int) string
	pool    func(int) chan struct{}
	failed  func(int) bool
	fn      func(int)
	skip    func(int, error)
	waiters map[int][]int
	keys    map[int]dispatchKey

	wg    sync.WaitGroup
	mu    sync.Mutex
	left  map[int]int             // prerequisites not finished yet
	ready map[chan struct{}][]int // by pool: items whose prerequisites finished, in dispatch order
	pools []chan struct{}         // the pools seen, in that order (dispatch is deterministic)
}

// readyLocked takes item i, whose prerequisites have all finished: skipped when one of them
// failed, else queued for its pool.
func (s *scheduler) readyLocked(i int) {
	for _, j := range s.after[i] {
		if s.failed(j) {
			s.skip(i, fmt.Errorf("dependency %s failed", s.name(j)))
			s.finishedLocked(i)
			return
		}
	}
	p := s.pool(i)
	q, seen := s.ready[p]
	if !seen {
		s.pools = append(s.pools, p)
	}
	k := sort.Search(len(q), func(n int) bool { return s.keys[i].less(s.keys[q[n]]) })
	q = append(q, 0)
	copy(q[k+1:], q[k:])
	q[k] = i
	s.ready[p] = q
}

// finishedLocked releases the items waiting for i.
func (s *scheduler) finishedLocked(i int) {
	for _, w := range s.waiters[i] {
		s.left[w]--
		if s.left[w] == 0 {
			s.readyLocked(w)
		}
	}
}

// dispatchLocked starts ready items, in dispatch order, while their pools have room.
func (s *scheduler) dispatchLocked() {
	for _, p := range s.pools {
	fill:
		for len(s.ready[p]) > 0 {
			select {
			case p <- struct{}{}:
			default:
				break fill // full: the next release dispatches again
			}
			i := s.ready[p][0]
			s.ready[p] = s.ready[p][1:]
			s.wg.Add(1)
			go s.run(i, p)
		}
	}
}

// run runs item i in a slot of pool p, then releases the slot and its waiters.
func (s *scheduler) run(i int, p chan struct{}) {
	defer s.wg.Done()
	if err := s.r.fatalErr(); err != nil {
		s.skip(i, fmt.Errorf("not started: %w", err))
	} else if err := s.ctx.Err(); err != nil {
		s.skip(i, fmt.Errorf("not started: %w", err))
	} else {
		s.fn(i)
	}
	<-p
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishedLocked(i)
	s.dispatchLocked()
}

// dispatchKey orders ready items: by the rank of the best waiter the item lets go (gate), then
// by the item's position in the walk.
type dispatchKey struct{ gate, pos int }

func (a dispatchKey) less(b dispatchKey) bool {
	if a.gate != b.gate {
		return a.gate < b.gate
	}
	return a.pos < b.pos
}

// dispatchKeys ranks the waiters (items with prerequisites) by how many prerequisites they
// have, fewest first (ties by position), and gives each item the rank of the best waiter it
// is a prerequisite of; items nobody waits for come after all others. Among ready items those
// that complete the smallest group of prerequisites go first, so a waiter is released as early
// as the pool allows and the next group follows — rather than every waiter becoming ready only
// near the end because the groups were worked on interleaved.
func dispatchKeys(items []int, deps, waiters map[int][]int) map[int]dispatchKey {
	var ws []int
	for _, i := range items {
		if len(deps[i]) > 0 {
			ws = append(ws, i)
		}
	}
	sort.SliceStable(ws, func(a, b int) bool { return len(deps[ws[a]]) < len(deps[ws[b]]) })
	rank := make(map[int]int, len(ws))
	for k, w := range ws {
		rank[w] = k
	}
	keys := make(map[int]dispatchKey, len(items))
	for k, i := range items {
		gate := len(ws)
		for _, w := range waiters[i] {
			if rank[w] < gate {
				gate = rank[w]
			}
		}
		keys[i] = dispatchKey{gate: gate, pos: k}
	}
	return keys
}
