package crash

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/drivers/libvirt"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/executor/exectest"
	"zyvor.dev/sysbox/internal/testenv"
)

// vmTopology is one VM (TCG, the scripts/guest-image image: %[1]s) on one network: the kill
// points of its create and reset are the VM's own.
const vmTopology = `
substrate "local" {
  driver "netns" {}
  driver "libvirt" {}
  backend "local" { path = ".sysbox/state" }
  parallelism = 1
}

resource "sysbox_artifact" "disk" {
  driver = "libvirt"
  kind   = "qcow2"
  source = "%[1]s/disk.qcow2"
}

resource "sysbox_artifact" "kernel" {
  driver = "libvirt"
  kind   = "kernel"
  source = "%[2]s"
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}

resource "sysbox_node" "vm" {
  driver    = "libvirt"
  artifact  = sysbox_artifact.disk
  kernel    = sysbox_artifact.kernel
  memory_mb = 256
  command   = ["console=ttyS0", "panic=-1", "quiet"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.10/24"]
  }
}
`

// vmKernelDir holds only the guest image's vmlinux and initrd.img (a kernel directory's
// identity is all of its content; the image directory also holds the 64 MB rootfs).
func vmKernelDir(t *testing.T, img string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "kernel")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"vmlinux", "initrd.img"} {
		b, err := os.ReadFile(filepath.Join(img, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestKillRealBinaryVM is the daemon tier of the crash matrix for VMs: the real sysbox binary
// with the real libvirt driver (TCG) killed after every checkpoint record of an apply creating
// a VM, and of a reset of that VM (one lab, reset again after each recovery, so a VM boots once
// per create kill and the resets restore its snapshot). After each kill `sysbox recover`
// finishes the run, libvirt holds exactly one domain and one overlay of the VM, `sysbox
// refresh` observes everything present, a second recover finds nothing, and the VM answers
// `sysbox exec`; the create loop ends each lab with `destroy` and a clean residue audit.
func TestKillRealBinaryVM(t *testing.T) {
	testenv.RequireRoot(t)
	_, err := os.Stat(libvirt.DefaultSocket)
	testenv.Require(t, err == nil, "needs a running libvirtd at "+libvirt.DefaultSocket+" (daemon-tier test)")
	img := testenv.GuestImage(t)
	topo := fmt.Sprintf(vmTopology, img, vmKernelDir(t, img))
	sb := exectest.CLI{Bin: binary}
	lab := func(t *testing.T) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(topo), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sb.Run(t, dir, nil, "destroy", "-auto-approve") })
		return dir
	}
	// oneVM checks the recovered lab: one domain and one overlay of the VM, everything present,
	// nothing left to recover, the guest answering.
	oneVM := func(t *testing.T, dir, what string) {
		t.Helper()
		sb.Must(t, dir, what+": recover", "recover")
		d, err := libvirt.New(libvirt.Options{DomainType: libvirt.TypeQEMU})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		count := func(stage string, exact bool) {
			t.Helper()
			st := readState(t, dir)
			if st == nil {
				return // killed before the first state save: nothing of ours may exist, see destroy
			}
			res, err := d.Residue(context.Background(), st.Lineage)
			if err != nil {
				t.Fatalf("%s: %s: residue: %v", what, stage, err)
			}
			kinds := map[string]int{}
			for _, o := range res {
				kinds[o.Kind]++
			}
			if kinds["domain"] > 1 || kinds["overlay"] > 1 || kinds["tap"] > 1 || kinds["snapshot"] > 1 ||
				(exact && (kinds["domain"] != 1 || kinds["overlay"] != 1 || kinds["tap"] != 1)) {
				t.Fatalf("%s: %s: libvirt holds %v of this topology, want one domain, overlay and tap at most (exactly, converged): %+v", what, stage, kinds, res)
			}
		}
		count("after recover", false)
		sb.Must(t, dir, what+": converging apply", "apply", "-auto-approve")
		count("after the converging apply", true)
		sb.Settled(t, dir, what)
		if out := sb.Must(t, dir, what, "exec", "sysbox_node.vm", "--", "hostname"); strings.TrimSpace(out) != "sysbox-guest" {
			t.Fatalf("%s: exec hostname in the VM: %q", what, out)
		}
	}
	t.Run("create", func(t *testing.T) {
		exectest.KillLoop{Point: executor.PointCheckpoint, Exact: true,
			Run: func(t *testing.T, n int) (exectest.Outcome, int, string) {
				dir := lab(t)
				r, passed := sb.KillAt(t, dir, executor.PointCheckpoint, n, "apply", "-auto-approve")
				return r, passed, dir
			},
			After: func(t *testing.T, dir, what string) {
				oneVM(t, dir, what)
				if out := sb.Must(t, dir, what, "destroy", "-auto-approve"); !strings.Contains(out, "Residue audit: no object") {
					t.Fatalf("%s: destroy:\n%s", what, out)
				}
			}}.Kill(t, "apply")
	})
	t.Run("reset", func(t *testing.T) {
		dir := lab(t)
		sb.Must(t, dir, "setup", "apply", "-auto-approve")
		exectest.KillLoop{Point: executor.PointCheckpoint, Exact: true,
			Run: func(t *testing.T, n int) (exectest.Outcome, int, string) {
				r, passed := sb.KillAt(t, dir, executor.PointCheckpoint, n, "reset", "sysbox_node.vm")
				return r, passed, dir
			},
			After: oneVM}.Kill(t, "reset")
	})
}
