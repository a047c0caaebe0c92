package firecracker

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// TestReleaseBuildLinksNoSimulator: the simulator and its contract checker are test code; the
// sysbox binary links the driver but neither of them.
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
		// The control plane server links kin-openapi's openapi3 to serve its own document; the
		// simulator's contract checking (openapi2 conversion, request validation) stays out.
		if strings.Contains(p, "/fcsim") || strings.HasPrefix(p, "github.com/getkin/kin-openapi/openapi2") ||
			strings.HasPrefix(p, "github.com/getkin/kin-openapi/openapi3filter") {
			t.Errorf("cmd/sysbox links %s", p)
		}
	}
}
