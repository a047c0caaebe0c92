package linuxnet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// reapFixture makes n bridges marked with owner, and one unmarked foreign bridge; everything is
// removed at cleanup.
func reapFixture(t *testing.T, n int) (id string, owner substrate.Owner, names []string, foreign string) {
	t.Helper()
	testenv.RequireRoot(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	id = hex.EncodeToString(b)
	owner = substrate.Owner{Topology: "test-" + id, Address: "sysbox_network.r", Type: "sysbox_network", Generation: 1}
	mk := func(name string, alias string) {
		v := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
		if err := netlink.LinkAdd(v); err != nil {
			t.Fatalf("add %s: %v", name, err)
		}
		t.Cleanup(func() { _ = netlink.LinkDel(v) })
		if alias != "" {
			if err := netlink.LinkSetAlias(v, alias); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range n {
		name := fmt.Sprintf("srp%s%d", id, i)
		mk(name, owner.Marker())
		names = append(names, name)
	}
	foreign = "srf" + id
	mk(foreign, "")
	return id, owner, names, foreign
}

func linkGone(t *testing.T, name string) bool {
	t.Helper()
	_, err := netlink.LinkByName(name)
	if err != nil && !isNotFound(err) {
		t.Fatalf("look up %s: %v", name, err)
	}
	return isNotFound(err)
}

// TestKernelConcurrentDeletesBatched: bridges deleted at the same time go in batches (fewer
// deletion requests than bridges, some deleted by group), each disappears, and an unmarked
// bridge next to them stays.
func TestKernelConcurrentDeletesBatched(t *testing.T) {
	_, owner, names, foreign := reapFixture(t, 12)
	b0, g0 := reaper.stats()
	var wg sync.WaitGroup
	errs := make([]error, len(names))
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = DeleteBridge(context.Background(), n, owner)
		}()
	}
	wg.Wait()
	for i, n := range names {
		if errs[i] != nil {
			t.Errorf("DeleteBridge(%s): %v", n, errs[i])
		}
		if !linkGone(t, n) {
			t.Errorf("%s: still there after its deletion", n)
		}
	}
	if linkGone(t, foreign) {
		t.Errorf("the unmarked link %s was deleted", foreign)
	}
	b1, g1 := reaper.stats()
	if b1-b0 >= uint64(len(names)) || g1 == g0 {
		t.Errorf("%d concurrent deletions took %d deletion requests, %d links by group; want fewer requests than links and some by group", len(names), b1-b0, g1-g0)
	}
}

// TestKernelBatchRefusesChangedMember: a batch member whose link no longer carries the alias its
// ownership check saw is refused and kept, with its group reset; the others are deleted by group.
func TestKernelBatchRefusesChangedMember(t *testing.T) {
	_, _, names, _ := reapFixture(t, 3)
	var batch []*reapReq
	for i, n := range names {
		l, err := netlink.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		q := &reapReq{link: l, alias: l.Attrs().Alias, done: make(chan error, 1)}
		if i == 1 { // its check saw another alias: the link is not what was checked
			q.alias = "sysbox1:someone-else"
		}
		batch = append(batch, q)
	}
	r := &linkReaper{group: randomGroup}
	g := r.group()
	r.deleteBatch(batch, g)
	for i, q := range batch {
		err := <-q.done
		switch {
		case i == 1 && err == nil:
			t.Errorf("changed member %s: deleted, want refused", names[i])
		case i == 1:
			if linkGone(t, names[i]) {
				t.Errorf("changed member %s: gone, want kept", names[i])
			} else if l, _ := netlink.LinkByName(names[i]); l.Attrs().Group != 0 {
				t.Errorf("changed member %s: group %d left on it, want 0", names[i], l.Attrs().Group)
			}
		case err != nil:
			t.Errorf("member %s: %v", names[i], err)
		case !linkGone(t, names[i]):
			t.Errorf("member %s: still there", names[i])
		}
	}
	if _, grouped := r.stats(); grouped != 2 {
		t.Errorf("links deleted by group: %d, want 2", grouped)
	}
}
