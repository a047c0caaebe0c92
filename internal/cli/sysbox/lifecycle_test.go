package sysbox

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestLifecycleCommands runs apply, output, exec, refresh, reset, recover, import and destroy
// on examples/lab-small with the fake driver standing in for netns and nftables (test mode).
func TestLifecycleCommands(t *testing.T) {
	dir, world, sb := fakeLabSmall(t)
	expect := func(r result, code int, want ...string) {
		t.Helper()
		expectResult(t, r, code, want...)
	}
	// Without approval (no terminal input) nothing happens.
	expect(sb("apply"), 1, "apply cancelled; nothing was changed")
	expect(sb("apply", "-auto-approve"), 0, "sysbox_node.web[0]: Creation complete", "Apply complete.")
	expect(sb("apply", "-auto-approve"), 0, "8 unchanged", "Apply complete.")
	expect(sb("output", "web_ips"), 0, `["198.51.100.10/24","198.51.100.11/24"]`)
	expect(sb("output", "nope"), 1, `output "nope": not declared in the configuration`)
	expect(sb("exec", "sysbox_node.web[0]", "--", "echo", "hi", "there"), 0, "hi there")
	expect(sb("exec", "sysbox_node.web[0]", "--", "false"), 1)

	// Drift behind sysbox's back: web[1] loses its NIC.
	st := readLocalState(t, filepath.Join(dir, ".sysbox", "state"))
	d, err := fake.New(fake.Options{Path: world})
	if err != nil {
		t.Fatal(err)
	}
	web1 := st.Resource(addrs.MustParseInstance("sysbox_node.web[1]"))
	if err := d.Remove(web1.ExternalID + "/lan"); err != nil {
		t.Fatal(err)
	}
	expect(sb("refresh"), 0, "sysbox_node.web[1]: degraded", "sysbox_node.web[0]: present")

	// Reset web[1] back to its baseline: new generation, same MAC, attachment back.
	expect(sb("reset", "sysbox_node.web[1]"), 0, "Reset complete")
	after := readLocalState(t, filepath.Join(dir, ".sysbox", "state")).Resource(web1.Addr)
	if after.ExternalID == web1.ExternalID || after.Attachments[0].MAC != web1.Attachments[0].MAC {
		t.Fatalf("reset: %s → %s", web1.ExternalID, after.ExternalID)
	}
	expect(sb("recover"), 0, "Nothing to recover")

	// Import refuses an address that is not configured.
	expect(sb("import", "sysbox_node.legacy", "legacy-1"), 1, "not in the configuration")

	// A topology-owned leftover unknown to state makes destroy fail its audit.
	d, _ = fake.New(fake.Options{Path: world})
	lost := substrate.Owner{Topology: st.Lineage, Address: "sysbox_node.lost", Type: "sysbox_node", Generation: 1}
	if _, err := d.CreateNode(context.Background(), substrate.NodeSpec{Owner: lost}); err != nil {
		t.Fatal(err)
	}
	expect(sb("destroy", "-auto-approve"), 1, "residue audit: 1 object(s)", "sysbox_node.lost")
	if st := readLocalState(t, filepath.Join(dir, ".sysbox", "state")); len(st.Resources) != 0 {
		t.Fatalf("state after destroy: %v", st.Addresses())
	}
}

// fakeLabSmall copies examples/lab-small and returns its directory, its fake world file and a
// runner of CLI commands in it (the fake driver stands in for netns and nftables).
func fakeLabSmall(t *testing.T) (dir, world string, sb func(args ...string) result) {
	dir = copyDir(t, "../../../examples/lab-small")
	world = filepath.Join(dir, "world.json")
	environ := []string{EnvTestFakeWorld + "=" + world, "WEB_TOKEN=cli-test-token"}
	return dir, world, func(args ...string) result {
		t.Helper()
		return run(t, environ, false, append([]string{"--chdir", dir}, args...)...)
	}
}

// TestApplyStalePlan: a stored plan made before the state changed is refused field by field
// with the stale-plan exit code, and nothing is touched.
func TestApplyStalePlan(t *testing.T) {
	dir := copyDir(t, "../../../examples/lab-small")
	world := filepath.Join(dir, "world.json")
	environ := []string{EnvTestFakeWorld + "=" + world, "WEB_TOKEN=x"}
	sb := func(args ...string) result {
		return runSame(t, environ, append([]string{"--chdir", dir}, args...)...)
	}
	// A stored plan of a fresh lab applies as it is.
	planFile := filepath.Join(dir, "p.plan")
	if r := sb("plan", "-out", planFile, "-var", "targets=1"); r.code != 0 {
		t.Fatalf("plan: %+v", r)
	}
	if r := sb("apply", planFile, "-var", "targets=1"); r.code != 0 {
		t.Fatalf("apply of a fresh stored plan: %+v", r)
	}
	if r := sb("plan", "-out", planFile); r.code != 0 {
		t.Fatalf("plan: %+v", r)
	}
	if r := sb("apply", "-auto-approve", "-var", "targets=3"); r.code != 0 {
		t.Fatalf("apply: %+v", r)
	}
	d, _ := fake.New(fake.Options{Path: world})
	before := d.World().Mutations
	r := sb("apply", planFile)
	if r.code != ExitStale || !strings.Contains(r.stderr, "serial changed") || strings.Contains(r.stderr, "drivers changed") {
		t.Fatalf("stale plan: got exit %d, stderr %s", r.code, r.stderr)
	}
	d, _ = fake.New(fake.Options{Path: world})
	if d.World().Mutations != before {
		t.Fatal("a stale plan mutated the world")
	}
}

// expectResult fails t unless the command exited with code and its output holds every want.
func expectResult(t *testing.T, r result, code int, want ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stdout+r.stderr, w) {
			t.Fatalf("output lacks %q\nstdout: %s\nstderr: %s", w, r.stdout, r.stderr)
		}
	}
}

func readLocalState(t *testing.T, path string) *states.State {
	t.Helper()
	b, err := local.New(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	st, err := b.Read(context.Background())
	if err != nil || st == nil {
		t.Fatalf("read state: %v", err)
	}
	return st
}

// runSame runs the CLI with the same registry for planning and applying (test mode).
func runSame(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &errb, Environ: environ, Version: "test"}
	env.LookupEnv = lookupIn(environ)
	env.Drivers = func() (plans.CapabilityChecker, error) { return DriverRegistry(env.LookupEnv) }
	code := Main(context.Background(), env, args)
	return result{code, out.String(), errb.String()}
}

// netnsOnlyCLI runs commands on the topology in dir with the real drivers and dockerd
// unreachable (a netns-only lab must not depend on it, destroy's audit included); the topology
// is destroyed when the test ends.
func netnsOnlyCLI(t *testing.T, dir string, environ ...string) func(args ...string) result {
	t.Helper()
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-dockerd.sock"))
	environ = append(environ, "PATH="+os.Getenv("PATH"))
	sb := func(args ...string) result {
		t.Helper()
		return runSame(t, environ, append([]string{"--chdir", dir}, args...)...)
	}
	t.Cleanup(func() {
		if r := sb("destroy", "-auto-approve"); r.code != 0 {
			t.Errorf("cleanup destroy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	return sb
}

// TestLifecycleRealDrivers is the kernel-tier run of the same commands on examples/lab-small
// with the real netns and nftables drivers: apply, provisioner result, traffic between two
// nodes through their firewalls, reset of one node (traffic works again, the firewall is back),
// a second recover that finds nothing, and destroy ending with a clean residue audit.
func TestLifecycleRealDrivers(t *testing.T) {
	testenv.RequireRoot(t)
	dir := copyDir(t, "../../../examples/lab-small")
	sb := netnsOnlyCLI(t, dir, "WEB_TOKEN=kernel-tier-token")
	expect := func(r result, code int, want ...string) {
		t.Helper()
		expectResult(t, r, code, want...)
	}
	expect(sb("apply", "-auto-approve"), 0, "Apply complete.")
	expect(sb("exec", "sysbox_node.web[0]", "--", "cat", "/tmp/ready"), 0, "ready")
	ping := func() result {
		return sb("exec", "sysbox_node.web[1]", "--", "busybox", "ping", "-c", "1", "-W", "2", "198.51.100.10")
	}
	expect(ping(), 0, "1 packets received")
	expect(sb("reset", "sysbox_node.web[0]"), 0, "Reset complete")
	expect(ping(), 0, "1 packets received")
	expect(sb("exec", "sysbox_node.web[0]", "--", "cat", "/tmp/ready"), 0, "ready")
	expect(sb("refresh"), 0, "sysbox_firewall.web[0]: present", "sysbox_node.web[0]: present")
	expect(sb("recover"), 0, "Nothing to recover")
	expect(sb("destroy", "-auto-approve"), 0, "Residue audit asked this topology's driver(s): netns, nftables\n",
		"Residue audit: no object carries this topology's markers.")
}
