package server

import (
	"os/exec"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// TestServerLinksNoHostRights: the API server's dependency list (normal build, the
// sysbox-server command included) holds no
// driver, no executor, no agent, no Docker client and no netlink: the server holds no Docker
// socket, KVM or libvirt rights (S18).
func TestServerLinksNoHostRights(t *testing.T) {
	gobin, err := testenv.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobin, "list", "-deps", "zyvor.dev/sysbox/internal/controlplane/...", "zyvor.dev/sysbox/cmd/sysbox-server").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed %d packages; the check would prove nothing", len(deps))
	}
	seen := 0
	for _, d := range deps {
		if d == "zyvor.dev/sysbox/internal/controlplane/server" || d == "zyvor.dev/sysbox/cmd/sysbox-server" {
			seen++
		}
		for _, bad := range []string{"zyvor.dev/sysbox/drivers/", "zyvor.dev/sysbox/internal/executor", "zyvor.dev/sysbox/internal/agent",
			"zyvor.dev/sysbox/internal/driver/fake", "github.com/docker/", "github.com/vishvananda/", "github.com/google/nftables", "github.com/digitalocean/go-libvirt"} {
			if strings.HasPrefix(d, bad) {
				t.Errorf("the control plane links %s", d)
			}
		}
	}
	if seen != 2 {
		t.Fatal("go list -deps did not list the server package and command themselves")
	}
}
