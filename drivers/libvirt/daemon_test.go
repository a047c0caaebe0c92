package libvirt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// EnvTestLibvirt says a libvirtd runs here (scripts/test-all starts one); the daemon tier then
// fails instead of skipping when it cannot reach it.
const EnvTestLibvirt = "SYSBOX_TEST_LIBVIRT"

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// tb is the part of testing.TB the helpers use (the conformance suite's T included).
type tb interface {
	Helper()
	Fatalf(string, ...any)
	Errorf(string, ...any)
	Cleanup(func())
}

// stateDir is a fresh driver state directory QEMU (libvirt-qemu, uid 64055) can traverse:
// t.TempDir() is 0700 and would fail the domain's start with "Permission denied".
func stateDir(t tb) string {
	t.Helper()
	if err := os.MkdirAll("/var/tmp/sysbox-libvirt-test", 0o755); err != nil {
		t.Fatalf("state dir: %v", err)
	}
	dir, err := os.MkdirTemp("/var/tmp/sysbox-libvirt-test", "state-")
	if err != nil {
		t.Fatalf("state dir: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("state dir: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// daemonDriver returns a driver on the local libvirtd with its own state directory, or skips
// (fails under SYSBOX_TEST_LIBVIRT=1 or SYSBOX_TEST_REQUIRE_ALL=1) when there is none.
func daemonDriver(t *testing.T, readyTimeout time.Duration) *Driver {
	t.Helper()
	testenv.RequireRoot(t)
	d, err := New(Options{StateDir: stateDir(t), ReadyTimeout: readyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, cerr := d.conn(ctx)
	if os.Getenv(EnvTestLibvirt) == "1" && cerr != nil {
		t.Fatalf("%s=1 but libvirtd is not reachable: %v", EnvTestLibvirt, cerr)
	}
	testenv.Require(t, cerr == nil, "needs a running libvirtd at "+d.socket+" (daemon-tier test; set "+EnvTestLibvirt+"=1 where one runs)")
	if d.DomainType() != TypeQEMU && os.Getenv("SYSBOX_TEST_LIBVIRT_KVM") != "1" {
		// This host's KVM (KVM_PVM) hangs guests; only run kvm where someone says it works.
		d.domainType = TypeQEMU
	}
	return d
}

// blankDisk writes a small empty qcow2 (a guest that boots nothing: the domain runs in its
// firmware) and returns its path.
func blankDisk(t tb) string {
	t.Helper()
	p := filepath.Join(stateDir(t), "blank.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", p, "16M").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	return p
}

// resolved resolves a blank disk artifact through d.
func resolved(t tb, d *Driver, path string) substrate.ArtifactIdentity {
	t.Helper()
	id, err := d.ResolveArtifact(context.Background(), substrate.ArtifactSpec{Kind: KindQCOW2, Source: path})
	if err != nil {
		t.Fatalf("resolve %s: %v", path, err)
	}
	return id
}

// cleanupTopology removes every domain, tap and overlay of topology when the test ends, also
// when it failed half-way.
func cleanupTopology(t tb, d *Driver, topology string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		c, err := d.conn(ctx)
		if err == nil {
			doms, _ := d.ownedDomains(ctx, c, topology)
			for _, od := range doms {
				_ = d.DeleteNode(ctx, nodeHandle(nodePrivate{UUID: formatUUID(od.dom.UUID), Name: od.dom.Name}), od.owner)
				_ = c.DomainDestroy(od.dom)
				_ = c.DomainUndefineFlags(od.dom, undefineFlags)
			}
		}
		taps, _ := tapResidue(topology)
		for _, tp := range taps {
			if l, err := netlink.LinkByName(tp.ExternalID); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
		_ = os.RemoveAll(d.overlayDir(topology))
	})
}

// testBridge creates a sysbox-marked bridge (as the netns driver's networks are) for topology.
func testBridge(t tb, topology, addr string) substrate.Handle {
	t.Helper()
	ctx := context.Background()
	owner := substrate.Owner{Topology: topology, Address: "sysbox_network.test", Type: "sysbox_network", Generation: 1}
	name := "sbv" + randHex(4)
	if err := linuxnet.CreateBridge(ctx, linuxnet.BridgeSpec{Name: name, Owner: owner}); err != nil {
		t.Fatalf("create bridge %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := linuxnet.DeleteBridge(ctx, name, owner); err != nil {
			t.Errorf("delete bridge %s: %v", name, err)
		}
	})
	if addr != "" {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatalf("bridge %s: %v", name, err)
		}
		a, err := netlink.ParseAddr(addr)
		if err != nil {
			t.Fatalf("bridge %s: address %q: %v", name, addr, err)
		}
		if err := netlink.AddrAdd(l, a); err != nil {
			t.Fatalf("bridge %s: address %s: %v", name, addr, err)
		}
	}
	return substrate.Handle{Driver: "netns", ExternalID: name}
}
