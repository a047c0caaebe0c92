package executor

import (
	"os/exec"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// TestImportsNoHandlersOrConcreteDrivers: the executor learns what a resource is through
// Resources and drives it through driver capabilities; it links no handler, no concrete or
// fake driver and no failpoint code (non-test dependencies only).
func TestImportsNoHandlersOrConcreteDrivers(t *testing.T) {
	gobin, err := testenv.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "zyvor.dev/sysbox/internal/executor").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !strings.Contains(string(out), "zyvor.dev/sysbox/internal/driver\n") {
		t.Fatalf("go list -deps gave %d packages without internal/driver: the check would pass on nothing", len(deps))
	}
	for _, d := range deps {
		for _, banned := range []string{"zyvor.dev/sysbox/internal/handlers", "zyvor.dev/sysbox/drivers/", "zyvor.dev/sysbox/internal/driver/fake", "zyvor.dev/sysbox/internal/executor/failpoint"} {
			if d == banned || strings.HasPrefix(d, banned) {
				t.Errorf("internal/executor depends on %s", d)
			}
		}
	}
}
