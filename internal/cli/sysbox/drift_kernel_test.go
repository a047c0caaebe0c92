package sysbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/testenv"
)

// TestApplyAfterDriftSuggestsRefreshRealDrivers (kernel tier): node b's process is killed and
// its namespace deleted out of band (`ip netns`). An apply that must touch b (a's aliases
// change, so a is replaced and b's hosts file gets the new set) fails naming b and ends with
// the refresh hint; refresh observes b absent; the apply then converges and plans no changes,
// nothing of b's first generation is left, and destroy's residue audit is clean.
func TestApplyAfterDriftSuggestsRefreshRealDrivers(t *testing.T) {
	testenv.RequireRoot(t)
	ip := testenv.RequireBinary(t, "ip")
	dir := t.TempDir()
	write := func(aAliases string) {
		t.Helper()
		topo := strings.ReplaceAll(aliasTopology, "BALIASES", `"beta"`)
		topo = strings.Replace(topo, `aliases = ["alpha"]`, "aliases = ["+aAliases+"]", 1)
		if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(topo), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`"alpha"`)
	sb := netnsOnlyCLI(t, dir)
	expectResult(t, sb("apply", "-auto-approve"), 0, "Apply complete.")

	// Out of band: b's main process is killed and its namespace deleted.
	ns := readLocalState(t, filepath.Join(dir, ".sysbox", "state")).Resource(addrs.MustParseInstance("sysbox_node.b")).ExternalID
	out, err := exec.Command(ip, "netns", "pids", ns).Output()
	if err != nil {
		t.Fatalf("ip netns pids %s: %v", ns, err)
	}
	pids := strings.Fields(string(out))
	if len(pids) == 0 {
		t.Fatalf("namespace %s of sysbox_node.b runs no process", ns)
	}
	for _, p := range pids {
		pid, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("ip netns pids %s: %q", ns, out)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", pid, err)
		}
	}
	if out, err := exec.Command(ip, "netns", "delete", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns delete %s: %v\n%s", ns, err, out)
	}

	write(`"alpha", "ay"`)
	r := sb("apply", "-auto-approve")
	expectResult(t, r, 1, "sysbox_node.b", ns)
	if !strings.HasSuffix(strings.TrimSpace(r.stderr), driftHint) {
		t.Fatalf("apply after drift: the error does not end with the refresh hint\nstderr: %s", r.stderr)
	}
	expectResult(t, sb("refresh"), 0, "sysbox_node.b: absent", "sysbox_node.a: present")
	expectResult(t, sb("apply", "-auto-approve"), 0, "Apply complete.")
	expectResult(t, sb("plan", "-detailed-exitcode"), 0, "No changes")
	expectResult(t, sb("exec", "sysbox_node.b", "--", "cat", "/etc/hosts"), 0, "198.51.100.41\talpha ay\n")

	// The files of b's first generation (sidecar, log, hosts file) went with the apply that
	// created its second; destroy's audit is clean.
	for _, ext := range []string{".json", ".hosts", ".log"} {
		if _, err := os.Lstat(filepath.Join("/run/sysbox/netns", ns+ext)); !os.IsNotExist(err) {
			t.Errorf("%s%s of the namespace deleted out of band after the converging apply: %v, want it gone", ns, ext, err)
		}
	}
	expectResult(t, sb("destroy", "-auto-approve"), 0, "Residue audit: no object carries this topology's markers.")
}
