package archtest

import (
	"os/exec"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// TestDependencyDirection checks every package of the module (normal build, no test files)
// against Rules.
func TestDependencyDirection(t *testing.T) {
	gobin, err := testenv.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobin, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, Module+"/...").Output()
	if err != nil {
		t.Fatalf("go list %s/...: %v", Module, err)
	}
	pkgs := Parse(string(out))
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages; the check would prove nothing", len(pkgs))
	}
	for _, v := range Violations(pkgs, Rules) {
		t.Error(v)
	}
}

// TestRulesCatchBadImports feeds the rules imports that go against the direction, one per
// rule, and checks each is reported; the same packages with allowed imports are not.
func TestRulesCatchBadImports(t *testing.T) {
	for _, tc := range []struct{ from, imp string }{
		{"internal/exec", "drivers/netns"},
		{"internal/executor", "drivers/docker"},
		{"internal/executor", "internal/driver/fake"},
		{"internal/exec", "internal/cli/sysbox"},
		{"drivers/netns", "internal/cli/sysbox"},
		{"drivers/docker", "internal/exec"},
		{"drivers/docker", "internal/executor"},
		{"drivers/nftables", "drivers/netns"},
		{"drivers/firecracker/internal/fcsim/cmd/firecracker", "drivers/netns"},
		{"drivers/fire/x", "drivers/firecracker/internal/fcsim"},
		{"drivers/netns", "internal/handlers"},
		{"pkg/substrate", "internal/durable"},
		{"pkg/substrate", "internal/driver"},
		{"internal/driver", "internal/durable"},
		{"internal/handlers", "drivers/netns"},
		{"internal/plans", "internal/exec"},
		{"internal/states", "internal/backend/local"},
		{"internal/backend/local", "internal/plans"},
		{"internal/api", "drivers/docker"},
		{"internal/controlplane/server", "drivers/netns"},
		{"internal/controlplane/store", "internal/executor"},
		{"internal/controlplane/server", "internal/agent"},
		{"internal/handlers", "internal/driver/fake"},
		{"fluxvm/upgrade", "internal/states"},
		{"internal/guestagent", "internal/durable"},
		{"cmd/sysbox-guest", "internal/driver"},
		{"cmd/sysbox-guest", "internal/cli/sysbox"},
		{"internal/driver/guestvm", "drivers/linuxnet"},
		{"internal/driver/guestvm", "internal/durable"},
		{"internal/driver/guestvm", "internal/driver/fake"},
		{"internal/guestagent", "internal/driver/guestvm"},
		{"internal/procfs", "internal/durable"},
		{"internal/procfs", "pkg/substrate"},
	} {
		got := Violations([]Package{{Path: tc.from, Imports: []string{tc.imp}}}, Rules)
		if len(got) == 0 {
			t.Errorf("%s importing %s: no rule broken, want one", tc.from, tc.imp)
		}
	}
	for _, tc := range []struct{ from, imp string }{
		{"internal/executor", "internal/driver"},
		{"drivers/netns", "drivers/linuxnet"},
		{"drivers/docker", "drivers/docker/imagetest"},
		{"drivers/firecracker/internal/fcsim/cmd/firecracker", "drivers/firecracker/internal/fcsim"},
		{"internal/cli/sysbox", "drivers/netns"},
		{"cmd/sysbox", "internal/cli/sysbox"},
		{"internal/handlers", "pkg/substrate"},
		{"fluxvm/upgrade", "internal/durable"},
		{"drivers/libvirt", "internal/guestagent"},
		{"cmd/sysbox-guest", "internal/guestagent"},
		{"internal/driver/guestvm", "internal/guestagent"},
		{"internal/driver/guestvm", "internal/driver"},
		{"internal/driver/guestvm", "pkg/substrate"},
		{"drivers/libvirt", "internal/driver/guestvm"},
		{"drivers/firecracker", "internal/driver/guestvm"},
		{"internal/controlplane/store", "internal/backend/sqlstore"},
		{"drivers/netns", "internal/procfs"},
		{"drivers/firecracker", "internal/procfs"},
		{"internal/cli/sysbox", "internal/procfs"},
	} {
		if got := Violations([]Package{{Path: tc.from, Imports: []string{tc.imp}}}, Rules); len(got) != 0 {
			t.Errorf("%s importing %s: %s, want allowed", tc.from, tc.imp, strings.Join(got, "; "))
		}
	}
}
