package testenv

import (
	"errors"
	"os"
	"testing"

	"zyvor.dev/sysbox/internal/feature"
)

// OptIn is for tiers no CI host can run (a feature this host cannot have, e.g. a KVM that boots
// guests): when err wraps feature.ErrNotSupported the test skips, saying why, unless the opt-in
// variable env is "1", where it fails. SYSBOX_TEST_REQUIRE_ALL does not apply: it is for
// features CI hosts have. Any other non-nil err fails the test.
func OptIn(t testing.TB, env string, err error) {
	t.Helper()
	switch {
	case err == nil:
	case !errors.Is(err, feature.ErrNotSupported):
		t.Fatal(err)
	case os.Getenv(env) == "1":
		t.Fatalf("%s=1 but: %v", env, err)
	default:
		t.Skipf("skipped (opt in with %s=1 on a host that has it): %v", env, err)
	}
}
