package crash

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/executor/exectest"
	"zyvor.dev/sysbox/internal/testenv"
)

// cloexecTopology has one netns node whose main process and provisioner each record their own
// open descriptors (/proc/$$/fd, readlink targets) while apply holds the state lock, the state
// file's CAS lock and the checkpoint log open.
const cloexecTopology = `
substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "198.18.7.0/24"
}

resource "sysbox_node" "probe" {
  driver  = "netns"
  command = ["sh", "-c", "for f in /proc/$$/fd/*; do echo $${f##*/}=$(readlink $f); done > %[1]s/main.fds; exec sleep infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.18.7.10/24"]
  }
  provisioner "exec" {
    command = ["sh", "-c", "for f in /proc/$$/fd/*; do echo $${f##*/}=$(readlink $f); done > %[1]s/provisioner.fds; true"]
  }
}
`

// TestNoDescriptorLeaksIntoChildren: no lock, state or checkpoint descriptor of sysbox is open
// in a node's main process or in a provisioner (all are opened close-on-exec). A leaked lock
// descriptor would keep the state locked after sysbox dies.
func TestNoDescriptorLeaksIntoChildren(t *testing.T) {
	testenv.RequireRoot(t)
	dir, out := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(fmt.Sprintf(cloexecTopology, out)), 0o644); err != nil {
		t.Fatal(err)
	}
	sysbox := func(args ...string) exectest.Outcome {
		c := exec.Command(binary, args...)
		c.Dir = dir
		return exectest.Run(t, fmt.Sprintf("sysbox %v", args), c)
	}
	t.Cleanup(func() {
		if r := sysbox("destroy", "-auto-approve"); r.Code != 0 {
			t.Errorf("destroy: %+v", r)
		}
	})
	must(t, sysbox("apply", "-auto-approve"), "apply")
	for _, name := range []string{"main.fds", "provisioner.fds"} {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fds := strings.Fields(string(b))
		if len(fds) < 3 { // stdin, stdout, stderr at least: the listing itself worked
			t.Fatalf("%s: only %d descriptors listed: %q", name, len(fds), fds)
		}
		for _, fd := range fds {
			_, target, _ := strings.Cut(fd, "=")
			if strings.HasPrefix(target, dir) || strings.Contains(target, ".sysbox") || strings.Contains(target, "checkpoint") || strings.HasSuffix(target, ".lock") {
				t.Errorf("%s: a sysbox descriptor leaked into the child: %s", name, fd)
			}
		}
		t.Logf("%s: %q", name, fds)
	}
}
