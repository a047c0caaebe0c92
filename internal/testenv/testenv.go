// Package testenv decides whether a test that needs a machine feature (root, a binary, a daemon)
// may skip. Locally it skips with the stated reason; in CI (SYSBOX_TEST_REQUIRE_ALL=1) a missing
// feature fails the test, so that CI can never pass by running nothing.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// RequireAll reports whether missing features must fail tests instead of skipping them.
func RequireAll() bool { return os.Getenv("SYSBOX_TEST_REQUIRE_ALL") == "1" }

// Require skips (or, under RequireAll, fails) the test with reason unless ok.
func Require(t testing.TB, ok bool, reason string) {
	t.Helper()
	if ok {
		return
	}
	if RequireAll() {
		t.Fatalf("required feature missing (SYSBOX_TEST_REQUIRE_ALL=1): %s", reason)
	}
	t.Skipf("skipped: %s", reason)
}

// RequireRoot needs euid 0.
func RequireRoot(t testing.TB) {
	t.Helper()
	Require(t, os.Geteuid() == 0, "needs root (kernel-tier test)")
}

// RequireBinary needs name on PATH and returns its path.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	Require(t, err == nil, name+" not found on PATH")
	return p
}

// RequireEnv needs the environment variable to be set and returns its value.
func RequireEnv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	Require(t, v != "", name+" is not set")
	return v
}

// GoTool returns the go command that builds the project's binaries for tests: the one on PATH,
// else the usual install location.
func GoTool() (string, error) {
	if p, err := exec.LookPath("go"); err == nil {
		return p, nil
	}
	const fallback = "/usr/local/go/bin/go"
	if _, err := os.Stat(fallback); err == nil {
		return fallback, nil
	}
	return "", errors.New("the go command is not on PATH (nor at " + fallback + "); tests that build the real binaries need it")
}

// GoBuild builds the package pkg (an import path or a directory relative to the current one)
// into the file out, with the given build tags.
func GoBuild(pkg, out string, tags ...string) error {
	gobin, err := GoTool()
	if err != nil {
		return err
	}
	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	b, err := exec.Command(gobin, append(args, pkg)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// BuildBinary builds pkg into a temporary directory that lives as long as the test and returns
// the binary's path; a build failure fails the test.
func BuildBinary(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(pkg))
	if err := GoBuild(pkg, out, tags...); err != nil {
		t.Fatal(err)
	}
	return out
}

// MainWithBinary is a TestMain body for packages that drive one built binary: it builds pkg with
// tags into a fresh world-readable directory (0755, so a test may run it as user nobody), sets
// *bin to its path, runs the tests and removes the directory. A build failure exits 1.
func MainWithBinary(m *testing.M, bin *string, pkg string, tags ...string) {
	dir, err := os.MkdirTemp("", "sysbox-bin-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err == nil {
		*bin = filepath.Join(dir, path.Base(pkg))
		err = GoBuild(pkg, *bin, tags...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// GuestImage builds (or reuses, by its content key) the VM test image of scripts/guest-image in
// SYSBOX_TEST_WORK/guest-image (default /tmp/sysbox-test-all) and returns that directory; the
// script is found from the current directory up to the module root. A failure fails the test.
func GuestImage(t testing.TB) string {
	t.Helper()
	work := os.Getenv("SYSBOX_TEST_WORK")
	if work == "" {
		work = "/tmp/sysbox-test-all"
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("guest image: no go.mod above the current directory")
		}
		dir = parent
	}
	script, out := filepath.Join(dir, "scripts", "guest-image"), filepath.Join(work, "guest-image")
	b, err := exec.Command(script, out).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", script, out, err, b)
	}
	t.Logf("%s", strings.TrimSpace(string(b)))
	return out
}
