package linuxnet

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Deleting a bridge costs the kernel far more than its own work: every RTM_DELLINK unregisters
// its device under the global rtnl lock with RCU grace periods in between, so concurrent bridge
// deletions queue behind each other. Measured here (kernel 6.18, 2026-12-02): 5 bridges deleted
// by 5 concurrent `ip link del` 0.23–0.24 s, the same 5 by one deletion of their link group
// 0.11 s. In a destroy, networks whose last nodes go at about the same time (every network, when
// each node depends on all of them) become deletable together, and their bridges are deleted
// together.
//
// Veths are not batched: their deletions wait after the lock, so concurrent ones already
// overlap, and batching them made a 1,000-node destroy slower (session 8, bench/netns/RESULTS.md).
//
// So bridges are deleted in batches: a caller whose ownership check passed queues the link;
// one caller at a time deletes everything queued while the previous batch was being deleted
// (group commit). A batch of one is deleted by its ifindex, as before. A larger batch is given a
// link group chosen at random from the upper half of the 32-bit range (iproute2's named groups
// and anything set by hand use small numbers), each member is checked again by ifindex — same
// name, same alias (owner marker) as the caller checked, and now in the batch's group — and the
// kernel deletes the group in one unregister (rtnl_group_dellink: all devices of the group in the
// caller's namespace, under one rtnl hold). A member that changed since its check is taken out
// of the batch and refused; if the group deletion fails, every member is deleted on its own.
//
// What this adds to the existing window between the ownership check and the deletion (which a
// deletion by ifindex has too): a foreign link that carried the batch's random group already.

// linkReaper group-commits host link deletions.
type linkReaper struct {
	mu      sync.Mutex
	queue   []*reapReq
	running bool
	// group returns the link group of a new batch (tests pin it).
	group func() uint32
	// batches and grouped count deletions (for tests and benchmarks): batches is the number of
	// RTM_DELLINK requests sent, grouped the links deleted by a group request.
	batches, grouped uint64
}

type reapReq struct {
	link  netlink.Link
	alias string // the alias the caller's ownership check saw
	done  chan error
}

var reaper = &linkReaper{group: randomGroup}

func randomGroup() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.NativeEndian.Uint32(b[:]) | 1<<31
}

// deleteHostLink deletes link (already ownership-checked: its alias is the caller's marker) from
// the host namespace, batched with the other deletions in flight. A link that is already gone
// is not an error.
func deleteHostLink(link netlink.Link) error { return reaper.delete(link) }

func (r *linkReaper) delete(link netlink.Link) error {
	req := &reapReq{link: link, alias: link.Attrs().Alias, done: make(chan error, 1)}
	r.mu.Lock()
	r.queue = append(r.queue, req)
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	return <-req.done
}

// run deletes batches until the queue is empty.
func (r *linkReaper) run() {
	for {
		r.mu.Lock()
		batch := r.queue
		r.queue = nil
		if len(batch) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		g := r.group()
		r.mu.Unlock()
		r.deleteBatch(batch, g)
	}
}

func (r *linkReaper) count(batches, grouped int) {
	r.mu.Lock()
	r.batches += uint64(batches)
	r.grouped += uint64(grouped)
	r.mu.Unlock()
}

// stats reports how many deletion requests the reaper sent and how many links went by group.
func (r *linkReaper) stats() (batches, grouped uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.batches, r.grouped
}

func (r *linkReaper) deleteBatch(batch []*reapReq, group uint32) {
	if len(batch) == 1 {
		r.count(1, 0)
		batch[0].done <- delOne(batch[0].link)
		return
	}
	var members []*reapReq
	for _, q := range batch {
		if err := netlink.LinkSetGroup(q.link, int(group)); err != nil {
			if isNotFound(err) {
				q.done <- nil
			} else {
				q.done <- fmt.Errorf("%s: set link group for deletion: %w", q.link.Attrs().Name, err)
			}
			continue
		}
		cur, err := netlink.LinkByIndex(q.link.Attrs().Index)
		switch {
		case isNotFound(err):
			q.done <- nil
			continue
		case err != nil:
			q.done <- fmt.Errorf("%s: %w", q.link.Attrs().Name, err)
			continue
		case cur.Attrs().Name != q.link.Attrs().Name || cur.Attrs().Alias != q.alias || uint32(cur.Attrs().Group) != group:
			// Not the link that was checked any more: never delete it by group.
			_ = netlink.LinkSetGroup(cur, 0)
			q.done <- fmt.Errorf("link %d changed since its ownership check (now %q, alias %q): not deleted", q.link.Attrs().Index, cur.Attrs().Name, cur.Attrs().Alias)
			continue
		}
		members = append(members, q)
	}
	switch len(members) {
	case 0:
		return
	case 1:
		r.count(1, 0)
		members[0].done <- delOne(members[0].link)
		return
	}
	if err := delGroup(group); err != nil {
		// Delete them one by one (the group stays on any that survive; it means nothing).
		r.count(1+len(members), 0)
		for _, q := range members {
			q.done <- delOne(q.link)
		}
		return
	}
	r.count(1, len(members))
	for _, q := range members {
		q.done <- nil
	}
}

func delOne(link netlink.Link) error {
	if err := netlink.LinkDel(link); err != nil && !isNotFound(err) {
		return err
	}
	return nil
}

// delGroup deletes every link of group in the host namespace in one request.
func delGroup(group uint32) error {
	if group == 0 {
		return errors.New("link group 0 is every link's default: never deleted by group")
	}
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
	req.AddData(nl.NewRtAttr(unix.IFLA_GROUP, nl.Uint32Attr(group)))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	return err
}
