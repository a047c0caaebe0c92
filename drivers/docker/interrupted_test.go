package docker

import (
	"context"
	"strconv"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestDaemonAttachAfterInterruptedWiring: a crash between creating a NIC's veth and setting its
// alias leaves an unmarked pair. Attach adopts it when its peer sits in the (label-proven)
// container's namespace, and refuses a same-named link whose peer is elsewhere.
func TestDaemonAttachAfterInterruptedWiring(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", topo)
	br := testBridge(t, topo, "")

	mkVeth := func(t *testing.T, host, peer string, pid int) {
		t.Helper()
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: peer}
		if pid > 0 {
			ns, err := netns.GetFromPid(pid)
			if err != nil {
				t.Fatal(err)
			}
			defer ns.Close()
			v.PeerNamespace = netlink.NsFd(int(ns))
		}
		if err := netlink.LinkAdd(v); err != nil {
			t.Fatalf("make veth %s: %v", host, err)
		}
		t.Cleanup(func() {
			if l, err := netlink.LinkByName(host); err == nil {
				_ = netlink.LinkDel(l)
			}
		})
	}
	attach := func(h substrate.Handle, owner substrate.Owner) (substrate.AttachmentState, error) {
		return d.Attach(ctx, h, substrate.AttachmentSpec{Owner: owner, Node: owner.Address, Name: "lan", Network: br,
			IPv4: []string{"198.18.0.10/24"}})
	}

	t.Run("unmarked pair into our container is adopted", func(t *testing.T) {
		owner := testOwner(topo, "a")
		h, _ := mustNode(t, d, owner, art, "sleep", "3600")
		ins, err := d.cli.ContainerInspect(ctx, h.ExternalID)
		if err != nil {
			t.Fatal(err)
		}
		mkVeth(t, hostIfName(owner, "lan"), guestIfName("lan"), ins.State.Pid)
		st, err := attach(h, owner)
		if err != nil {
			t.Fatalf("Attach over an interrupted wiring: %v", err)
		}
		if obs, err := d.ObserveAttachment(ctx, h, st, owner); err != nil || obs.Status != substrate.Present {
			t.Fatalf("ObserveAttachment: got %s (%s), %v; want present", obs.Status, obs.Reason, err)
		}
	})
	t.Run("unmarked link of that name elsewhere is refused", func(t *testing.T) {
		owner := testOwner(topo, "b")
		h, _ := mustNode(t, d, owner, art, "sleep", "3600")
		host := hostIfName(owner, "lan")
		mkVeth(t, host, "sbx"+randHex(4), 0) // peer stays in the host namespace
		before, err := netlink.LinkByName(host)
		if err != nil {
			t.Fatal(err)
		}
		_, err = attach(h, owner)
		wantErrIs(t, "Attach over a foreign link", err, driver.ErrNotOwned)
		after, err := netlink.LinkByName(host)
		if err != nil || after.Attrs().Index != before.Attrs().Index {
			t.Fatalf("foreign link %s: got %v (index %s), want it untouched (index %d)", host, err, idx(after), before.Attrs().Index)
		}
	})
}

func idx(l netlink.Link) string {
	if l == nil {
		return "none"
	}
	return strconv.Itoa(l.Attrs().Index)
}
