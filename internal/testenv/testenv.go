// Package testenv decides whether a test that needs a machine feature (root, a binary, a daemon)
// may skip. Locally it skips with the stated reason; in CI (SYSBOX_TEST_REQUIRE_ALL=1) a missing
// feature fails the test, so that CI can never pass by running nothing.
package testenv

import (
	"os"
	"os/exec"
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
