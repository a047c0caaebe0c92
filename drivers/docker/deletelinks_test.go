package docker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/pkg/substrate"
)

// TestDaemonDeleteNodeRemovesRecordedLinks: DeleteNode removes the host sides of the NICs the
// container's record names — Attach records a NIC before wiring it, so a NIC wired but never
// detached (its attachment did not reach state) is among them — and no other host link: it
// does not list the host's links, and a marked link it did not record is left for the residue
// audit to report.
func TestDaemonDeleteNodeRemovesRecordedLinks(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", topo)
	br := testBridge(t, topo, "")
	attach := func(h substrate.Handle, owner substrate.Owner, bridge string) (substrate.AttachmentState, error) {
		return d.Attach(ctx, h, substrate.AttachmentSpec{Owner: owner, Node: owner.Address, Name: "lan",
			Network: substrate.Handle{Driver: br.Driver, ExternalID: bridge}, IPv4: []string{"198.18.0.10/24"}})
	}

	t.Run("wired and not detached", func(t *testing.T) {
		owner := testOwner(topo, "a")
		h, _ := mustNode(t, d, owner, art, "sleep", "3600")
		if _, err := attach(h, owner, br.ExternalID); err != nil {
			t.Fatalf("Attach: %v", err)
		}
		host := hostIfName(owner, "lan")
		if _, err := netlink.LinkByName(host); err != nil {
			t.Fatalf("host side %s after Attach: %v", host, err)
		}
		if err := d.DeleteNode(ctx, h, owner); err != nil {
			t.Fatalf("DeleteNode: %v", err)
		}
		// At once, not when the kernel gets round to the container's namespace.
		if l, err := netlink.LinkByName(host); err == nil {
			t.Fatalf("host side %s (alias %q) survived DeleteNode", host, l.Attrs().Alias)
		}
		if _, err := os.Stat(d.sidecarPath(h.ExternalID)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("NIC record after DeleteNode: stat got %v, want it gone", err)
		}
	})

	t.Run("wiring failed", func(t *testing.T) {
		owner := testOwner(topo, "b")
		h, _ := mustNode(t, d, owner, art, "sleep", "3600")
		if _, err := attach(h, owner, "sbt"+randHex(4)); err == nil {
			t.Fatal("Attach to a bridge that does not exist: got no error")
		}
		if _, err := os.Stat(d.sidecarPath(h.ExternalID)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("NIC record after a failed Attach: stat got %v, want none (nothing is wired)", err)
		}
		if err := d.DeleteNode(ctx, h, owner); err != nil {
			t.Fatalf("DeleteNode: %v", err)
		}
	})

	t.Run("marked link not recorded", func(t *testing.T) {
		owner := testOwner(topo, "c")
		h, _ := mustNode(t, d, owner, art, "sleep", "3600")
		name := "sbx" + randHex(4)
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: "sbx" + randHex(4)}
		if err := netlink.LinkAdd(v); err != nil {
			t.Fatalf("make veth %s: %v", name, err)
		}
		t.Cleanup(func() {
			if l, err := netlink.LinkByName(name); err == nil {
				_ = netlink.LinkDel(l)
			}
		})
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetAlias(l, nicAlias(owner, "other")); err != nil {
			t.Fatal(err)
		}
		if err := d.DeleteNode(ctx, h, owner); err != nil {
			t.Fatalf("DeleteNode: %v", err)
		}
		if _, err := netlink.LinkByName(name); err != nil {
			t.Fatalf("marked link %s DeleteNode did not record: got %v, want it left for the audit", name, err)
		}
		res, err := d.Residue(ctx, topo)
		if err != nil {
			t.Fatal(err)
		}
		var reported bool
		for _, o := range res {
			if o.Kind == "veth" && o.ExternalID == name && o.Owner.Equal(owner) {
				reported = true
			}
		}
		if !reported {
			t.Fatalf("Residue: got %+v, want the marked link %s reported", res, name)
		}
	})
}
