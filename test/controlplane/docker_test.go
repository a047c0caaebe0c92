package controlplane

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/drivers/docker/imagetest"
	"zyvor.dev/sysbox/internal/testenv"
)

// TestDockerRunLandsOnDockerAgent: beside a netns-only agent (fake world), an agent offering
// the real docker driver (dockerd of the daemon tier); a remote apply of a topology with a
// container lands on the docker agent, which runs it in dockerd, and a remote destroy removes it.
func TestDockerRunLandsOnDockerAgent(t *testing.T) {
	testenv.Require(t, os.Getenv("SYSBOX_TEST_DOCKER") == "1", "needs a running dockerd (daemon-tier test; set SYSBOX_TEST_DOCKER=1 where one runs)")
	testenv.RequireRoot(t)
	testenv.Require(t, fileExists(imagetest.Busybox), "needs "+imagetest.Busybox+" (apt-get install busybox-static)")
	r := newRig(t, "6s")
	nsAgent, _ := r.agent("ns-only", "netns")
	// The docker agent drives the host's dockerd: no fake world.
	var j obj
	r.admin.call("POST", "/v1/projects/"+r.project+"/tokens", map[string]string{"kind": "join", "name": "docker"}, &j, 201)
	dockerAgent := start(t, []string{"SYSBOX_JOIN_TOKEN=" + j.Token}, "agent", "--server", r.url, "--data", filepath.Join(r.work, "agent-docker"),
		"--name", "docker", "--drivers", "docker", "--poll", "100ms")
	dockerAgent.waitLine(t, "sysbox agent ")

	dir := filepath.Join(r.work, "containers")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rootfs, err := imagetest.Rootfs(imagetest.Busybox, "cp-"+filepath.Base(r.work))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "busybox-rootfs.tar"), rootfs, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(`
substrate "local" {
  driver "docker" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_artifact" "busybox" {
  kind   = "rootfs"
  source = "busybox-rootfs.tar"
}
resource "sysbox_node" "ctr" {
  driver   = "docker"
  artifact = sysbox_artifact.busybox
  command  = ["sleep", "3600"]
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{"SYSBOX_TOKEN=" + r.user.token}
	destroyed := false
	t.Cleanup(func() {
		if !destroyed {
			cli(t, dir, env, "destroy", "-auto-approve", "--remote", r.url, "--workspace", "containers")
		}
	})
	out, errOut, code := cli(t, dir, env, "apply", "-auto-approve", "--remote", r.url, "--workspace", "containers")
	if code != 0 || !strings.Contains(out, "sysbox_node.ctr: Creation complete") {
		t.Fatalf("remote apply of a container: exit %d\n%s%s", code, out, errOut)
	}
	if !strings.Contains(dockerAgent.output(), "run claimed") || strings.Contains(nsAgent.output(), "run claimed") {
		t.Fatalf("the run did not land on the docker agent only:\ndocker agent:\n%s\nnetns agent:\n%s", dockerAgent.output(), nsAgent.output())
	}
	show, _, code := cli(t, dir, env, "state", "show", "sysbox_node.ctr", "--json", "--remote", r.url, "--workspace", "containers")
	var st struct {
		ExternalID string `json:"external_id"`
		Status     string `json:"status"`
	}
	if code != 0 || json.Unmarshal([]byte(show), &st) != nil || st.Status != "present" || st.ExternalID == "" {
		t.Fatalf("remote state show of the container: exit %d\n%s", code, show)
	}
	// dockerd itself runs the container.
	if b, err := exec.Command("docker", "inspect", "-f", "{{.State.Running}}", st.ExternalID).CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != "true" {
		t.Fatalf("docker inspect %s: %v %s", st.ExternalID, err, b)
	}
	out, errOut, code = cli(t, dir, env, "destroy", "-auto-approve", "--remote", r.url, "--workspace", "containers")
	if code != 0 {
		t.Fatalf("remote destroy of the container: exit %d\n%s%s", code, out, errOut)
	}
	destroyed = true
	if b, err := exec.Command("docker", "inspect", st.ExternalID).CombinedOutput(); err == nil {
		t.Fatalf("container %s still exists after the remote destroy:\n%s", st.ExternalID, b)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
