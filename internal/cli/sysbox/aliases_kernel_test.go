package sysbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

const aliasTopology = `
substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}
resource "sysbox_node" "a" {
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.41/24"]
    aliases = ["alpha"]
  }
}
resource "sysbox_node" "b" {
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.42/24"]
    aliases = [BALIASES]
  }
}
`

// TestAliasesResolveAndFollowChangesRealDrivers (kernel tier): nodes resolve and ping each
// other by attachment alias; changing b's aliases is planned (b is replaced: attachments are
// wired at creation) and the apply makes the new name resolve on a — which was not replaced —
// and the old one stop resolving; destroy leaves no hosts file behind.
func TestAliasesResolveAndFollowChangesRealDrivers(t *testing.T) {
	testenv.RequireRoot(t)
	bb := testenv.RequireBinary(t, "busybox")
	dir := t.TempDir()
	write := func(aliases string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(strings.ReplaceAll(aliasTopology, "BALIASES", aliases)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`"beta", "bee"`)
	sb := netnsOnlyCLI(t, dir)
	expectResult(t, sb("apply", "-auto-approve"), 0, "Apply complete.")
	ping := func(from, name string) result {
		return sb("exec", from, "--", bb, "ping", "-c", "1", "-W", "2", name)
	}
	expectResult(t, ping("sysbox_node.a", "beta"), 0, "1 packets received")
	expectResult(t, ping("sysbox_node.a", "bee"), 0, "1 packets received")
	expectResult(t, ping("sysbox_node.b", "alpha"), 0, "1 packets received")
	expectResult(t, sb("exec", "sysbox_node.a", "--", "cat", "/etc/hosts"), 0, "198.51.100.42\tbeta bee\n", "198.51.100.41\talpha\n")

	write(`"gamma"`)
	r := sb("plan", "-detailed-exitcode")
	if r.code != 2 || !strings.Contains(r.stdout, "sysbox_node.b") || !strings.Contains(r.stdout, "aliases") {
		t.Fatalf("plan after changing b's aliases: exit %d, want 2 with sysbox_node.b's aliases\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if strings.Contains(r.stdout, "sysbox_node.a ") {
		t.Fatalf("plan after changing b's aliases touches a:\n%s", r.stdout)
	}
	expectResult(t, sb("apply", "-auto-approve"), 0, "Apply complete.")
	expectResult(t, ping("sysbox_node.a", "gamma"), 0, "1 packets received")
	if r := ping("sysbox_node.a", "beta"); r.code == 0 {
		t.Fatalf("beta still resolves on a after the change:\n%s", r.stdout)
	}
	expectResult(t, sb("plan", "-detailed-exitcode"), 0, "No changes")
	expectResult(t, sb("destroy", "-auto-approve"), 0, "Residue audit: no object carries this topology's markers.")
}
