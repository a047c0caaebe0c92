package firecracker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestConformance runs the driver conformance suite on the firecracker driver with fcsim as the
// VMM (kernel tier: real TAPs on real bridges).
func TestConformance(t *testing.T) {
	testenv.RequireRoot(t)
	d := New(Options{Binary: simBinary, StateDir: stateDir(t)})
	drivertest.Run(t, harness(t, d))
}

// stateDir is a short (socket paths), world-readable state directory removed with the test.
func stateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fcd")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// artifacts are a rootfs baseline and a kernel file; the simulator only opens them.
type artifacts struct {
	rootfs, kernel substrate.ArtifactIdentity
}

func testArtifacts(t testing.TB) artifacts {
	t.Helper()
	dir := stateDir(t)
	rootfs := filepath.Join(dir, "rootfs.ext4")
	// 1 MiB with data at both ends and a hole in the middle, so the copy's sparseness shows.
	f, err := os.Create(rootfs)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write([]byte("sysbox-rootfs-head"))
	if err == nil {
		_, err = f.WriteAt([]byte("tail"), 1<<20-4)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	kernel := filepath.Join(dir, "vmlinux")
	if err := os.WriteFile(kernel, []byte("\x7fELF-not-a-real-kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	return artifacts{
		rootfs: substrate.ArtifactIdentity{Kind: "rootfs", Source: rootfs, Digest: fileDigest(t, rootfs)},
		kernel: substrate.ArtifactIdentity{Kind: "kernel", Source: kernel, Digest: fileDigest(t, kernel)},
	}
}

func fileDigest(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (a artifacts) spec(o substrate.Owner) substrate.NodeSpec {
	rootfs, kernel := a.rootfs, a.kernel
	return substrate.NodeSpec{Owner: o, Driver: Name, Artifact: &rootfs, Kernel: &kernel, CPUs: 2, MemoryMB: 64}
}

func harness(t *testing.T, d *Driver) drivertest.Harness {
	art := testArtifacts(t)
	return drivertest.Harness{
		Driver:            d,
		AttachBeforeStart: true,
		Topology: func(t drivertest.T) string {
			topo := drivertest.RandomTopology()
			t.Cleanup(func() { scrub(t, d, topo) })
			return topo
		},
		NodeSpec: func(_ drivertest.T, o substrate.Owner) substrate.NodeSpec { return art.spec(o) },
		Network: func(t drivertest.T, o substrate.Owner, _ string) substrate.Handle {
			return testBridge(t, o)
		},
		// A state directory that cannot be listed (a regular file) is what an unreachable
		// backend is to this driver: no record can be read, so nothing is proven or touched.
		Unreachable: func(t drivertest.T) (driver.Driver, func()) {
			return New(Options{Binary: simBinary, StateDir: drivertest.NotADirectory(t)}), func() {}
		},
		Artifact: func(drivertest.T) substrate.ArtifactSpec {
			return substrate.ArtifactSpec{Kind: KindRootfs, Source: art.rootfs.Source}
		},
		Foreign: func(t drivertest.T, _ string, o substrate.Owner, _ substrate.Handle) func() bool {
			return foreignVMM(t, filepath.Join(d.stateDir, NodeName(o)))
		},
	}
}

// testBridge creates a sysbox-marked bridge for o, removed when the case ends.
func testBridge(t drivertest.T, o substrate.Owner) substrate.Handle {
	name := linuxnet.IfName("sbtfc", o.Topology, o.Address)
	if err := linuxnet.CreateBridge(context.Background(), linuxnet.BridgeSpec{Name: name, Owner: o}); err != nil {
		t.Fatalf("bridge %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := linuxnet.DeleteBridge(context.Background(), name, o); err != nil {
			t.Errorf("delete bridge %s: %v", name, err)
		}
	})
	return substrate.Handle{Driver: "netns", ExternalID: name}
}

// foreignVMM starts a simulator process serving a socket inside dir (created, with no sysbox
// record): a firecracker sysbox did not start, holding the node's name.
func foreignVMM(t drivertest.T, dir string) func() bool {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("foreign VMM dir: %v", err)
	}
	sock := filepath.Join(dir, apiSock)
	cmd := exec.Command(simBinary, "--api-sock", sock, "--id", "foreign")
	if err := cmd.Start(); err != nil {
		t.Fatalf("foreign VMM: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		os.RemoveAll(dir)
	})
	if err := waitAPI(context.Background(), sock, "foreign", exited); err != nil {
		t.Fatalf("foreign VMM: %v", err)
	}
	return func() bool {
		select {
		case <-exited:
			return false
		default:
		}
		_, recErr := os.Stat(filepath.Join(dir, recordFile))
		_, sockErr := os.Stat(sock)
		return errors.Is(recErr, os.ErrNotExist) && sockErr == nil && syscall.Kill(cmd.Process.Pid, 0) == nil
	}
}

// scrub removes everything of topo the driver's audit lists: VMM processes (recorded ones
// only), node directories, jail directories and TAPs.
func scrub(t drivertest.T, d *Driver, topo string) {
	objs, err := d.Residue(context.Background(), topo)
	if err != nil {
		t.Errorf("scrub %s: %v", topo, err)
		return
	}
	// VMMs first: a jail directory goes after its VMM.
	sort.SliceStable(objs, func(i, j int) bool { return objs[i].Kind == "firecracker-vm" && objs[j].Kind != "firecracker-vm" })
	for _, o := range objs {
		switch o.Kind {
		case "firecracker-vm":
			if r, err := d.readRecord(o.ExternalID); err == nil {
				_ = killVMM(context.Background(), r.Name, r)
			}
			os.RemoveAll(d.nodeDir(o.ExternalID))
		case kindChroot:
			os.RemoveAll(o.ExternalID)
		case "tap":
			if l, err := netlink.LinkByName(o.ExternalID); err == nil {
				_ = netlink.LinkDel(l)
			}
		}
	}
}

// TestConformanceJailed runs the suite once more with every VMM under the jailer stand-in.
func TestConformanceJailed(t *testing.T) {
	testenv.RequireRoot(t)
	base := stateDir(t)
	t.Cleanup(func() {
		if err := waitNoProcessesUnder(base); err != nil {
			t.Error(err)
		}
	})
	d := New(Options{StateDir: stateDir(t)})
	if err := d.Configure(map[string]string{"binary": simBinary, "jailer": jailerBinary,
		"uid": strconv.Itoa(testUID), "gid": strconv.Itoa(testGID), "chroot_base": base}); err != nil {
		t.Fatal(err)
	}
	drivertest.Run(t, harness(t, d))
}
