package firecracker

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// TestReleaseBuildLinksNoSimulator: the simulator and its contract checker are test code; the
// sysbox binary links the driver but neither of them, nor any OpenAPI library.
func TestReleaseBuildLinksNoSimulator(t *testing.T) {
	gobin, err := testenv.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "zyvor.dev/sysbox/cmd/sysbox").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/sysbox: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "zyvor.dev/sysbox/drivers/firecracker") {
		t.Fatal("cmd/sysbox does not link the firecracker driver; the check would prove nothing")
	}
	for _, p := range deps {
		// OpenAPI parsing and validation (the simulator's contract checks, the control plane's
		// response checks) is test code: its start-up cost would be paid by every command.
		if strings.Contains(p, "/fcsim") || strings.HasPrefix(p, "github.com/getkin/kin-openapi/") ||
			strings.HasPrefix(p, "github.com/santhosh-tekuri/jsonschema") {
			t.Errorf("cmd/sysbox links %s", p)
		}
	}
}
