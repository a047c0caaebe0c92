package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/docker/imagetest"
	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testOwner is a node owner in a fresh topology.
func testOwner(topology, name string) substrate.Owner {
	return substrate.Owner{Topology: topology, Address: "sysbox_node." + name, Type: "sysbox_node", Generation: 1}
}

// daemonDriver returns a driver on the local daemon, or skips (fails in CI) when there is none.
func daemonDriver(t *testing.T) *Driver {
	t.Helper()
	testenv.RequireRoot(t)
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, perr := d.cli.Ping(ctx)
	reachable := perr == nil
	if os.Getenv("SYSBOX_TEST_DOCKER") == "1" && !reachable {
		t.Fatalf("SYSBOX_TEST_DOCKER=1 but the docker daemon is not reachable: %v", perr)
	}
	testenv.Require(t, reachable, "needs a running dockerd (daemon-tier test; set SYSBOX_TEST_DOCKER=1 where one runs)")
	return d
}

// testImage writes a busybox image archive of the given kind into a temp dir and returns its
// path. marker makes the content (and so the digest) unique to the test.
func testImage(t *testing.T, kind, marker string) string {
	t.Helper()
	testenv.Require(t, fileExists(imagetest.Busybox), "needs "+imagetest.Busybox+" (apt-get install busybox-static)")
	rootfs, err := imagetest.Rootfs(imagetest.Busybox, marker)
	if err != nil {
		t.Fatal(err)
	}
	data := rootfs
	switch kind {
	case "docker-archive":
		data, err = imagetest.DockerArchive(rootfs, "")
	case "oci-layout":
		data, err = imagetest.OCILayout(rootfs)
	}
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), kind+".tar")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// resolveTestImage loads a fresh busybox rootfs image and removes it when the test ends.
func resolveTestImage(t *testing.T, d *Driver, kind, marker string) substrate.ArtifactIdentity {
	t.Helper()
	specKind := KindRootfs
	if kind != "rootfs" {
		specKind = KindOCIImage
	}
	p := testImage(t, kind, marker)
	id, err := d.ResolveArtifact(context.Background(), substrate.ArtifactSpec{Kind: specKind, Source: p})
	if err != nil {
		t.Fatalf("ResolveArtifact(%s): %v", kind, err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		// Containers still using the image (a failed test's) go first, or the removal fails.
		users, _ := d.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", id.Ref))})
		for _, c := range users {
			_ = d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
		if _, err := d.cli.ImageRemove(ctx, id.Ref, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
			t.Errorf("remove test image %s: %v", id.Ref, err)
		}
	})
	return id
}

// tb is what the helpers below need of a test: *testing.T and drivertest.T both have it.
type tb interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// cleanupTopology force-removes every container and host link carrying topology's markers, so
// a failed test leaves nothing behind.
func cleanupTopology(t tb, d *Driver, topology string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background()
		list, _ := d.listOwned(ctx, topology, "")
		for _, c := range list {
			// Through the driver first (it also drops the NIC record), then by force.
			if o, ok := ownerFromLabels(c.Labels); ok {
				_ = d.DeleteNode(ctx, substrate.Handle{Driver: Name, ExternalID: c.ID}, o)
			}
			_ = d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
		if recs, err := d.sidecarResidue(topology); err == nil {
			for _, r := range recs {
				_ = os.Remove(r.ExternalID)
			}
		}
		links, _ := hostMarkedLinks()
		for _, l := range links {
			if l.Owner.Topology == topology {
				if ln, err := netlink.LinkByName(l.Name); err == nil {
					_ = netlink.LinkDel(ln)
				}
			}
		}
	})
}

// testBridge creates an owner-marked Linux bridge with addr on its host side (may be empty)
// through drivers/linuxnet, which also adds the host forward-accept rule dockerd's FORWARD DROP
// policy needs; both are removed when the test ends.
func testBridge(t tb, topology, addr string) substrate.Handle {
	t.Helper()
	ctx := context.Background()
	owner := substrate.Owner{Topology: topology, Address: "sysbox_network.test", Type: "sysbox_network", Generation: 1}
	name := "sbt" + randHex(4)
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
		// linuxnet.CreateBridge pins the bridge's MAC (BridgeMAC), so ports coming and going do
		// not change the address the host answers from.
		if got, want := l.Attrs().HardwareAddr.String(), linuxnet.BridgeMAC(owner).String(); got != want {
			t.Fatalf("bridge %s: MAC %s, want the pinned %s", name, got, want)
		}
		a, err := netlink.ParseAddr(addr)
		if err != nil {
			t.Fatalf("bridge %s: address %q: %v", name, addr, err)
		}
		if err := netlink.AddrAdd(l, a); err != nil {
			t.Fatalf("bridge %s: add %s: %v", name, addr, err)
		}
	}
	return substrate.Handle{Driver: "test-bridge", ExternalID: name}
}

// mustNode creates and starts a busybox node running cmd.
func mustNode(t *testing.T, d *Driver, owner substrate.Owner, art substrate.ArtifactIdentity, cmd ...string) (substrate.Handle, substrate.NodeSpec) {
	t.Helper()
	spec := substrate.NodeSpec{Owner: owner, Driver: Name, Artifact: &art, Command: cmd}
	h, err := d.CreateNode(context.Background(), spec)
	if err != nil {
		t.Fatalf("CreateNode %s: %v", owner.Address, err)
	}
	if err := d.StartNode(context.Background(), h, spec); err != nil {
		t.Fatalf("StartNode %s: %v", owner.Address, err)
	}
	return h, spec
}

func wantErrIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}
