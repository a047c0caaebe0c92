package netns

import (
	"context"
	"testing"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestConformance runs the driver conformance suite on the netns driver (kernel tier).
func TestConformance(t *testing.T) {
	testenv.RequireRoot(t)
	bb := testenv.RequireBinary(t, "busybox")
	d := New()
	drivertest.Run(t, harness(d, bb))
}

// harness is the conformance harness for d; nodes run `busybox sleep`.
func harness(d *Driver, busybox string) drivertest.Harness {
	return drivertest.Harness{
		Driver: d,
		Topology: func(t drivertest.T) string {
			topo := drivertest.RandomTopology()
			t.Cleanup(func() { ScrubTopology(context.Background(), d, topo) })
			return topo
		},
		NodeSpec: func(_ drivertest.T, o substrate.Owner) substrate.NodeSpec {
			return substrate.NodeSpec{Owner: o, Driver: Name, Command: []string{busybox, "sleep", "3600"}}
		},
		// A namespace directory that cannot be read (here: a regular file where the directory
		// should be) is what an unreachable backend looks like to this driver.
		Unreachable: func(t drivertest.T) (driver.Driver, func()) {
			file := drivertest.NotADirectory(t)
			return &Driver{NetnsDir: file, StateDir: file}, func() {}
		},
		NoBackend: map[driver.Capability]string{
			driver.CapManagedNetwork: "bridges live in the host's own namespace, reached by netlink; there is no backend to cut off",
		},
		Foreign: func(t drivertest.T, kind string, o substrate.Owner, _ substrate.Handle) func() bool {
			if kind == drivertest.ForeignNetwork {
				return foreignBridge(t, BridgeName(o))
			}
			return foreignNetns(t, d, NetnsName(o))
		},
	}
}

// foreignNetns mounts an unmarked namespace at name, as `ip netns add` would.
func foreignNetns(t drivertest.T, d *Driver, name string) func() bool {
	path := d.nsPath(name)
	if err := createNamedNetns(path, nil); err != nil {
		t.Fatalf("foreign netns %s: %v", name, err)
	}
	t.Cleanup(func() { _ = removeNamedNetns(path) })
	ino, err := nsInode(path)
	if err != nil {
		t.Fatalf("foreign netns %s: %v", name, err)
	}
	return func() bool {
		got, err := nsInode(path)
		return err == nil && got == ino && isNetnsMount(path) && unmarked(d.ns(name))
	}
}

// foreignBridge creates an unmarked bridge named name in the host namespace.
func foreignBridge(t drivertest.T, name string) func() bool {
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatalf("foreign bridge %s: %v", name, err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
		}
	})
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("foreign bridge %s: %v", name, err)
	}
	index := l.Attrs().Index
	return func() bool {
		l, err := netlink.LinkByName(name)
		return err == nil && l.Attrs().Index == index && l.Attrs().Alias == ""
	}
}
