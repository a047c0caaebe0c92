package sysbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/testenv"
)

// identityTopology has two nodes on one network whose attachments take the default MAC; the
// NAME placeholders are the node blocks' names, renamed after `state mv`.
const identityTopology = `
substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}
resource "sysbox_node" "FIRST" {
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.21/24"]
  }
}
resource "sysbox_node" "SECOND" {
  driver  = "netns"
  count   = COUNT
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.${22 + count.index}/24"]
  }
}
`

func writeIdentityTopology(t *testing.T, dir, first, second, count string) {
	t.Helper()
	src := strings.NewReplacer("FIRST", first, "SECOND", second, "COUNT", count).Replace(identityTopology)
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkMoveKeepsIdentity applies the topology, moves an unrepeated node and a counted one with
// `state mv`, renames their blocks, and expects a plan without changes: the default MACs were
// fixed in state at creation and do not follow the new addresses.
func checkMoveKeepsIdentity(t *testing.T, sb func(args ...string) result) {
	t.Helper()
	expect := func(r result, code int, want ...string) {
		t.Helper()
		expectResult(t, r, code, want...)
	}
	expect(sb("apply", "-auto-approve"), 0, "Apply complete.")
	expect(sb("state", "mv", "sysbox_node.n1", "sysbox_node.first"), 0, "Moved sysbox_node.n1 to sysbox_node.first")
	expect(sb("state", "mv", "sysbox_node.pool", "sysbox_node.web"), 0,
		"Moved sysbox_node.pool[0] to sysbox_node.web[0]", "Moved sysbox_node.pool[1] to sysbox_node.web[1]")
	expect(sb("plan", "-detailed-exitcode"), 2) // the blocks still have the old names
}

func TestStateMvThenRenamePlansNoChange(t *testing.T) {
	dir := t.TempDir()
	writeIdentityTopology(t, dir, "n1", "pool", "2")
	environ := []string{EnvTestFakeWorld + "=" + filepath.Join(dir, "world.json")}
	sb := func(args ...string) result {
		t.Helper()
		return run(t, environ, false, append([]string{"--chdir", dir}, args...)...)
	}
	checkMoveKeepsIdentity(t, sb)
	writeIdentityTopology(t, dir, "first", "web", "2")
	if r := sb("plan", "-detailed-exitcode"); r.code != 0 || !strings.Contains(r.stdout, "No changes") {
		t.Fatalf("plan after mv + rename: exit %d, want 0 (no changes)\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	st := readLocalState(t, filepath.Join(dir, ".sysbox", "state"))
	first := st.Resource(addrs.MustParseInstance("sysbox_node.first"))
	if first == nil || !strings.Contains(string(first.Attributes), first.Attachments[0].MAC) {
		t.Fatalf("sysbox_node.first: stored attributes do not hold the MAC the node was created with: %+v", first)
	}
	// a count → for_each migration done with state mv keeps the MACs too
	for _, mv := range [][2]string{{"sysbox_node.web[0]", `sysbox_node.web["a"]`}, {"sysbox_node.web[1]", `sysbox_node.web["b"]`}} {
		if r := sb("state", "mv", mv[0], mv[1]); r.code != 0 {
			t.Fatalf("mv %s %s: %s%s", mv[0], mv[1], r.stdout, r.stderr)
		}
	}
	src := strings.NewReplacer("FIRST", "first", "SECOND", "web", "count   = COUNT", `for_each = { a = 22, b = 23 }`,
		"${22 + count.index}", "${each.value}").Replace(identityTopology)
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := sb("plan", "-detailed-exitcode"); r.code != 0 || !strings.Contains(r.stdout, "No changes") {
		t.Fatalf("plan after count → for_each by mv: exit %d, want 0 (no changes)\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

// TestStateMvThenRenamePlansNoChangeRealDrivers is the kernel-tier run: real namespaces and
// veths, apply, mv, rename, and a plan that changes nothing.
func TestStateMvThenRenamePlansNoChangeRealDrivers(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	writeIdentityTopology(t, dir, "n1", "pool", "2")
	sb := netnsOnlyCLI(t, dir)
	checkMoveKeepsIdentity(t, sb)
	writeIdentityTopology(t, dir, "first", "web", "2")
	if r := sb("plan", "-detailed-exitcode"); r.code != 0 || !strings.Contains(r.stdout, "No changes") {
		t.Fatalf("plan after mv + rename: exit %d, want 0 (no changes)\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r := sb("refresh"); r.code != 0 || !strings.Contains(r.stdout, "sysbox_node.first: present") || !strings.Contains(r.stdout, "sysbox_node.web[1]: present") {
		t.Fatalf("refresh after mv: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r := sb("destroy", "-auto-approve"); r.code != 0 || !strings.Contains(r.stdout, "Residue audit: no object carries this topology's markers.") {
		t.Fatalf("destroy after mv: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
