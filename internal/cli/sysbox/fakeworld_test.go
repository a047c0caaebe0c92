package sysbox

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/testenv"
)

// The package's own tests drive the CLI in process against the fake world.
func init() {
	testRegistry = func(world string, names []string) (*driver.Registry, error) { return fake.StandIn(world, names...) }
}

func TestFakeWorldRefusedOutsideTestBuilds(t *testing.T) {
	saved := testRegistry
	testRegistry = nil
	defer func() { testRegistry = saved }()
	lookup := func(k string) (string, bool) {
		if k == EnvTestFakeWorld {
			return t.TempDir() + "/world.json", true
		}
		return "", false
	}
	_, err := DriverRegistry(lookup)
	if err == nil || !strings.Contains(err.Error(), "not a test build") {
		t.Fatalf("got %v, want a refusal naming the missing test build", err)
	}
}

// TestReleaseBuildLinksNoFake: `go list -deps ./cmd/sysbox` lists no fake driver; with the
// sysboxtest tag it does (so the check sees what it looks for).
func TestReleaseBuildLinksNoFake(t *testing.T) {
	gobin, err := testenv.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	const fakePkg = "zyvor.dev/sysbox/internal/driver/fake"
	for _, tc := range []struct {
		tags string
		want bool
	}{{"", false}, {"sysboxtest", true}} {
		out, err := exec.Command(gobin, "list", "-deps", "-tags="+tc.tags, "zyvor.dev/sysbox/cmd/sysbox").Output()
		if err != nil {
			t.Fatalf("go list -deps -tags=%q ./cmd/sysbox: %v", tc.tags, err)
		}
		if got := slices.Contains(strings.Fields(string(out)), fakePkg); got != tc.want {
			t.Errorf("go list -deps -tags=%q ./cmd/sysbox lists %s: %v, want %v", tc.tags, fakePkg, got, tc.want)
		}
	}
}
