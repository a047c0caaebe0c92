package netns

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestKernelCrashWindowsAdoptedOnlyWithIntent recreates what a SIGKILL leaves between creating
// an object and marking it, and checks that a re-run adopts it only when the durable intent of
// exactly that owner names it.
func TestKernelCrashWindowsAdoptedOnlyWithIntent(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()

	// 1. Placeholder file of a namespace, killed before the bind mount.
	o1 := l.owner("sysbox_node", "sysbox_node.placeholder")
	n1 := NetnsName(o1)
	if err := os.MkdirAll(l.d.NetnsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.d.writeSidecar(sidecar{Marker: o1.Marker(), Netns: n1}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.d.nsPath(n1), nil, 0o444); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNamedNetns(l.d.nsPath(n1)) })
	h1, err := l.d.CreateNode(ctx, substrate.NodeSpec{Owner: o1})
	if err != nil {
		t.Fatalf("CreateNode over its own placeholder: %v", err)
	}
	if obs, _ := l.d.ObserveNode(ctx, h1, o1); obs.Status != substrate.Present {
		t.Errorf("ObserveNode after adopting the placeholder: got %s (%s), want present", obs.Status, obs.Reason)
	}

	// 2. Mounted namespace, killed before marking it.
	o2 := l.owner("sysbox_node", "sysbox_node.unmarked")
	n2 := NetnsName(o2)
	other := o2
	other.Generation = 7
	if err := l.d.writeSidecar(sidecar{Marker: other.Marker(), Netns: n2}); err != nil {
		t.Fatal(err)
	}
	if err := createNamedNetns(l.d.nsPath(n2), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNamedNetns(l.d.nsPath(n2)) })
	if _, err := l.d.CreateNode(ctx, substrate.NodeSpec{Owner: o2}); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("CreateNode over an unmarked namespace whose intent names another owner: got %v, want ErrNotOwned", err)
	}
	if err := l.d.writeSidecar(sidecar{Marker: o2.Marker(), Netns: n2}); err != nil {
		t.Fatal(err)
	}
	h2, err := l.d.CreateNode(ctx, substrate.NodeSpec{Owner: o2})
	if err != nil {
		t.Fatalf("CreateNode over its own unmarked namespace: %v", err)
	}
	if got, err := nsMarker(l.d.ns(n2)); err != nil || !got.Equal(o2) {
		t.Errorf("marker after adoption: got %+v, %v; want %+v", got, err, o2)
	}

	// 3. A bridge created but not marked, with and without the intent.
	netOwner := l.owner("sysbox_network", "sysbox_network.lan")
	br := BridgeName(netOwner)
	if err := netlink.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: br, TxQLen: -1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(br); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	if _, err := l.d.CreateNetwork(ctx, substrate.NetworkSpec{Owner: netOwner}); err == nil {
		t.Fatalf("CreateNetwork adopted an unmarked bridge without an intent")
	}
	if err := writeIntentForTest(l.d, br, netOwner); err != nil {
		t.Fatal(err)
	}
	nh, err := l.d.CreateNetwork(ctx, substrate.NetworkSpec{Owner: netOwner})
	if err != nil {
		t.Fatalf("CreateNetwork with its intent: %v", err)
	}

	// 4. A veth created but not marked, with the intent: Attach replaces it.
	host := HostVethName(o2, "lan")
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host, TxQLen: -1}, PeerName: "sbtp" + l.topology[5:11]}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // the pair stays if the test fails before Attach replaces it
		if l, err := netlink.LinkByName(host); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	if err := writeIntentForTest(l.d, host, o2); err != nil {
		t.Fatal(err)
	}
	st, err := l.d.Attach(ctx, h2, substrate.AttachmentSpec{Owner: o2, Node: o2.Address, Name: "lan", Network: nh, IPv4: []string{"192.0.2.5/24"}})
	if err != nil {
		t.Fatalf("Attach over its own unmarked leftover: %v", err)
	}
	if obs, _ := l.d.ObserveAttachment(ctx, h2, st, o2); obs.Status != substrate.Present {
		t.Errorf("ObserveAttachment: got %s (%s), want present", obs.Status, obs.Reason)
	}

	for _, n := range []struct {
		h substrate.Handle
		o substrate.Owner
	}{{h1, o1}, {h2, o2}} {
		if err := l.d.DeleteNode(ctx, n.h, n.o); err != nil {
			t.Errorf("DeleteNode(%s): %v", n.o.Address, err)
		}
	}
	if err := l.d.DeleteNetwork(ctx, nh, netOwner); err != nil {
		t.Errorf("DeleteNetwork: %v", err)
	}
	if objs := l.residue(); len(objs) != 0 {
		t.Errorf("residue: got %+v, want none", objs)
	}
}

// TestKernelStartAdoptsUnrecordedMainProcess: a run killed between starting the main process
// and recording its pid must not make the next run start a second one.
func TestKernelStartAdoptsUnrecordedMainProcess(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	n := l.node("sysbox_node.a", []string{"sleep", "1000"})
	pid := observePid(t, l, n)
	sc, err := l.d.readSidecar(n.h.ExternalID)
	if err != nil {
		t.Fatal(err)
	}
	sc.Pid, sc.StartTime = 0, 0 // what the sidecar holds if the kill came before the record
	if err := l.d.writeSidecar(sc); err != nil {
		t.Fatal(err)
	}
	if err := l.d.StartNode(ctx, n.h, n.spec); err != nil {
		t.Fatalf("StartNode: %v", err)
	}
	if got := observePid(t, l, n); got != pid {
		t.Errorf("main process after re-start: got pid %s, want the unrecorded %s adopted", got, pid)
	}
	if got := len(pidsInNetns(sc.NsInode)); got != 1 {
		t.Errorf("processes in the namespace: got %d, want 1", got)
	}
	l.destroy([]*testNode{n})
}

// TestKernelDeleteKilledAfterUnmount: a delete killed between unmounting the namespace and
// removing its mount point leaves an empty regular file next to the node's sidecar. A re-run
// (recovery) must finish the delete — stop, delete, observe absent, no residue — and a file
// that a foreign sidecar claims must still be refused.
func TestKernelDeleteKilledAfterUnmount(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	n := l.node("sysbox_node.a", []string{"sleep", "1000"})
	path := l.d.nsPath(n.h.ExternalID)
	if err := l.d.StopNode(ctx, n.h, n.owner); err != nil {
		t.Fatal(err)
	}
	// What DeleteNode has done when the kill comes: processes gone, namespace unmounted.
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		t.Fatalf("after unmount %s: %v %v, want an empty regular file", path, fi, err)
	}

	foreign := n.owner
	foreign.Generation++
	if err := l.d.DeleteNode(ctx, n.h, foreign); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("DeleteNode by another generation: got %v, want ErrNotOwned", err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the refused delete removed %s: %v", path, err)
	}

	if err := l.d.StopNode(ctx, n.h, n.owner); err != nil {
		t.Errorf("StopNode after the interrupted delete: %v", err)
	}
	if err := l.d.DeleteNode(ctx, n.h, n.owner); err != nil {
		t.Fatalf("DeleteNode after the interrupted delete: %v", err)
	}
	if err := l.d.DeleteNode(ctx, n.h, n.owner); err != nil {
		t.Errorf("second DeleteNode: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s after delete: %v, want it gone", path, err)
	}
	if _, err := l.d.readSidecar(n.h.ExternalID); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("sidecar after delete: %v, want it gone", err)
	}
	if obs, _ := l.d.ObserveNode(ctx, n.h, n.owner); obs.Status != substrate.Absent {
		t.Errorf("ObserveNode after delete: got %s (%s), want absent", obs.Status, obs.Reason)
	}
	if objs := l.residue(); len(objs) != 0 {
		t.Errorf("residue: got %+v, want none", objs)
	}
}
