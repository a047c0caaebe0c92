package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"zyvor.dev/sysbox/drivers/docker/imagetest"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/procfs"
	"zyvor.dev/sysbox/internal/testenv"
)

// e2eTopology: a Docker web node and a netns probe on one managed network, a firewall on the
// web node, and a secret in the web node's environment.
const e2eTopology = `
substrate "local" {
  driver "netns" {}
  driver "docker" {}
  driver "nftables" {}
  backend "local" { path = ".sysbox/state" }
  # One operation at a time, so a failpoint kill lands between steps of one operation rather
  # than inside another operation running in parallel.
  parallelism = 1
}

resource "sysbox_artifact" "busybox" {
  kind   = "rootfs"
  source = "busybox-rootfs.tar"
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "192.0.2.0/24"
}

resource "sysbox_node" "%[1]s" {
  driver   = "docker"
  artifact = sysbox_artifact.busybox
  command  = ["httpd", "-f", "-p", "80", "-h", "/www"]
  environment = {
    TOKEN = env("E2E_WEB_TOKEN")
  }
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["192.0.2.10/24"]
  }
}

resource "sysbox_node" "probe" {
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["192.0.2.20/24"]
  }
}

resource "sysbox_firewall" "web" {
  node          = sysbox_node.%[1]s
  default_input = "drop"
  rule {
    chain            = "input"
    action           = "accept"
    protocol         = "tcp"
    destination_port = 80
  }
}
`

type e2eLab struct {
	t      *testing.T
	d      *Driver
	bin    string
	dir    string
	web    string // resource name of the docker node
	secret string
}

// run runs the sysbox CLI in the lab directory with extra environment.
func (l *e2eLab) run(env []string, args ...string) (string, error) {
	cmd := exec.Command(l.bin, args...)
	cmd.Dir = l.dir
	cmd.Env = append(append(os.Environ(), "E2E_WEB_TOKEN="+l.secret), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (l *e2eLab) must(args ...string) string {
	l.t.Helper()
	out, err := l.run(nil, args...)
	if err != nil {
		l.t.Fatalf("sysbox %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// webContainers lists the containers labelled with the web node's address.
func (l *e2eLab) webContainers() []container.Summary {
	list, err := l.d.cli.ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", labelAddress+"=sysbox_node."+l.web))})
	if err != nil {
		l.t.Fatalf("list containers: %v", err)
	}
	return list
}

// restartDockerd stops the daemon (SIGTERM, as an init system would) and starts it again with
// the same command line and log file, waiting until it answers. Containers have no restart
// policy, so they come back stopped, their namespaces and NICs gone.
func restartDockerd(t *testing.T, d *Driver) {
	t.Helper()
	raw, err := os.ReadFile("/var/run/docker.pid")
	if err != nil {
		t.Fatalf("dockerd pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("dockerd pid %q: %v", raw, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		t.Fatalf("dockerd command line: %v", err)
	}
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	logPath, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/2", pid))
	// Whatever happens below, the test leaves a daemon running.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if _, err := d.cli.Ping(ctx); err != nil {
			startDockerd(t, d, argv, logPath)
		}
	})
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop dockerd: %v", err)
	}
	if !waitExit(pid, 45*time.Second) {
		t.Logf("dockerd %d ignored SIGTERM for 45s; killing it", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitExit(pid, 10*time.Second) {
			t.Fatalf("dockerd %d does not exit", pid)
		}
	}
	startDockerd(t, d, argv, logPath)
}

// waitExit waits until pid is gone (or a zombie we cannot reap: its parent is not us).
func waitExit(pid int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			return true
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.Exited() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func startDockerd(t *testing.T, d *Driver, argv []string, logPath string) {
	t.Helper()
	var logf *os.File
	if strings.HasPrefix(logPath, "/") {
		logf, _ = os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	}
	if logf == nil {
		logf, _ = os.OpenFile(filepath.Join(os.TempDir(), "dockerd-restarted.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dockerd: %v", err)
	}
	_ = cmd.Process.Release() // the daemon outlives the test, as the one it replaces would
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := d.cli.Ping(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd did not answer within 60s after restart: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDaemonRestartMidApplyRecovered drives the real CLI: an apply is killed (executor
// failpoint) right after the Docker node is running and wired, then dockerd restarts (the
// container stops, its namespace and NIC vanish). The next apply recovers from the checkpoint
// and converges; the lab serves. A second daemon restart after a complete apply is observed as
// degraded and converges by replacement; a targeted reset replaces the container and leaves the
// neighbour alone. Destroy leaves no residue.
func TestDaemonRestartMidApplyRecovered(t *testing.T) {
	d := daemonDriver(t)
	testenv.Require(t, os.Getenv("SYSBOX_TEST_DOCKER") == "1", "restarts dockerd: runs only with SYSBOX_TEST_DOCKER=1 (scripts/test-all sets it)")
	testenv.RequireBinary(t, "busybox")
	dir := t.TempDir()
	l := &e2eLab{t: t, d: d, bin: filepath.Join(dir, "sysbox"), dir: filepath.Join(dir, "lab"), web: "web_" + randHex(4), secret: "e2e-" + randHex(8)}
	if err := testenv.GoBuild("zyvor.dev/sysbox/cmd/sysbox", l.bin, "sysboxtest"); err != nil { // SYSBOX_EXEC_FAILPOINT below
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rootfs, err := imagetest.Rootfs(imagetest.Busybox, "served by "+l.web+"\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, "busybox-rootfs.tar"), rootfs, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.dir, "main.sysbox.hcl"), []byte(fmt.Sprintf(e2eTopology, l.web)), 0o644); err != nil {
		t.Fatal(err)
	}
	imgDigest, _, err := hashFile(filepath.Join(l.dir, "busybox-rootfs.tar"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Artifacts stay in the daemon as a content-addressed cache after destroy; the test's
		// image is unique to it, so it goes.
		_, _ = d.cli.ImageRemove(context.Background(), artifactTag(imgDigest), image.RemoveOptions{Force: true, PruneChildren: true})
	})
	t.Cleanup(func() {
		if out, err := l.run(nil, "destroy", "-auto-approve"); err != nil {
			t.Logf("clean-up destroy: %v\n%s", err, out)
		}
		for _, c := range l.webContainers() {
			_ = d.cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true})
		}
	})

	// Find the first checkpoint at which the web container runs, kill the CLI there.
	killedAt := 0
	for n := 1; n <= 60 && killedAt == 0; n++ {
		out, err := l.run([]string{"SYSBOX_EXEC_FAILPOINT=checkpoint@" + strconv.Itoa(n)}, "apply", "-auto-approve", "--parallelism", "1")
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("apply with failpoint checkpoint@%d: got %v, want killed by the failpoint\n%s", n, err, out)
		}
		// The point must be mid-operation: the container runs but its create is not past
		// wiring. One operation at a time keeps the records in one order; a kill after the
		// web node's later steps (its create complete: the restart below would then be plain
		// drift, found by refresh, not recovery) is skipped like one before the container runs.
		if cs := l.webContainers(); len(cs) == 1 && cs[0].State == "running" && l.webStepMidCreate() {
			killedAt = n
			break
		}
		l.must("destroy", "-auto-approve") // recovers the interrupted run and removes it all
	}
	if killedAt == 0 {
		t.Fatalf("the web container never ran before the apply finished its checkpoints")
	}
	t.Logf("apply killed after checkpoint record %d with the web container running", killedAt)

	restartDockerd(t, d)
	if cs := l.webContainers(); len(cs) != 1 || cs[0].State == "running" {
		t.Fatalf("after the daemon restart: got %+v, want the one web container, stopped", cs)
	}
	out := l.must("apply", "-auto-approve")
	if !strings.Contains(out, "Apply complete") {
		t.Fatalf("apply after the restart:\n%s", out)
	}
	l.checkServes("after recovery")

	restartDockerd(t, d)
	if refresh := l.must("refresh"); !strings.Contains(refresh, "sysbox_node."+l.web+": degraded") {
		t.Fatalf("refresh after a second daemon restart: want sysbox_node.%s degraded\n%s", l.web, refresh)
	}
	plan := l.must("plan")
	if !strings.Contains(plan, "sysbox_node."+l.web+" replace") || !strings.Contains(plan, "degraded") {
		t.Fatalf("plan after a second daemon restart: want sysbox_node.%s replaced as degraded\n%s", l.web, plan)
	}
	l.must("apply", "-auto-approve")
	l.checkServes("after convergence")

	// A targeted reset: a new container from the verified baseline, same address and MAC, the
	// firewall re-applied; the netns neighbour is not touched.
	before := l.webContainers()
	probeBefore := l.must("state", "show", "sysbox_node.probe")
	if out := l.must("reset", "sysbox_node."+l.web); !strings.Contains(out, "Reset complete") {
		t.Fatalf("reset:\n%s", out)
	}
	after := l.webContainers()
	if len(before) != 1 || len(after) != 1 || after[0].ID == before[0].ID {
		t.Fatalf("reset: containers before %d, after %d; want one, replaced", len(before), len(after))
	}
	if probeAfter := l.must("state", "show", "sysbox_node.probe"); probeAfter != probeBefore {
		t.Fatalf("reset of the web node changed the probe's state:\n%s\n---\n%s", probeBefore, probeAfter)
	}
	l.checkServes("after reset")

	out = l.must("destroy", "-auto-approve")
	if !strings.Contains(out, "no object carries this topology's markers") {
		t.Fatalf("destroy: want an empty residue audit\n%s", out)
	}
	if cs := l.webContainers(); len(cs) != 0 {
		t.Fatalf("after destroy: %d web containers remain", len(cs))
	}
}

// webStepMidCreate reports whether the interrupted run's checkpoint log leaves the web node's
// create at "attached" or "wired": the container is running and recovery must finish the
// operation. The log is read as recovery reads it (durable.Read: checksums, sequence, the one
// repair rule), each record's payload decoded by field name into checkpointOp, so the check
// depends on the documented record fields, not on how the executor orders them.
func (l *e2eLab) webStepMidCreate() bool {
	l.t.Helper()
	addr := "sysbox_node." + l.web
	last, ops := "", 0
	_, err := durable.Read(filepath.Join(l.dir, ".sysbox", "checkpoint.log"), checkpointKind, checkpointVersion, func(rec durable.Record) error {
		var r checkpointRecord
		if err := json.Unmarshal(rec.Payload, &r); err != nil {
			return err
		}
		if r.Type != "op" {
			return nil
		}
		// Every op record names its operation and step; one that does not means the format
		// changed under this test, which must fail rather than never find the kill point.
		if r.Op == nil || r.Op.Address == "" || r.Op.Action == "" || r.Op.Step == "" {
			return fmt.Errorf("op record %d lacks address, action or step: %s", rec.Seq, rec.Payload)
		}
		ops++
		if r.Op.Address == addr && r.Op.Action == "create" {
			last = r.Op.Step
		}
		return nil
	})
	if err != nil {
		l.t.Fatalf("read the interrupted run's checkpoint log: %v", err)
	}
	if ops == 0 { // called once the web container runs: its create was recorded
		l.t.Fatalf("the interrupted run's checkpoint log holds no operation record")
	}
	return last == "attached" || last == "wired"
}

// The checkpoint log's record kind and version (executor's checkpointKind/checkpointVersion),
// and the fields of its records this test reads (executor.record, executor.OpState).
const checkpointKind, checkpointVersion = "sysbox-checkpoint", 1

type checkpointRecord struct {
	Type string        `json:"type"`
	Op   *checkpointOp `json:"op"`
}

type checkpointOp struct {
	Address string `json:"address"`
	Action  string `json:"action"`
	Step    string `json:"step"`
}

// checkServes checks that every node is present, the probe reaches the web node through the
// firewall, and the secret reached the container but not the state.
func (l *e2eLab) checkServes(stage string) {
	l.t.Helper()
	refresh := l.must("refresh")
	for _, addr := range []string{"sysbox_node." + l.web, "sysbox_node.probe", "sysbox_firewall.web", "sysbox_network.lan"} {
		if !strings.Contains(refresh, addr+": present") {
			l.t.Fatalf("%s: refresh: want %s present\n%s", stage, addr, refresh)
		}
	}
	bb, _ := exec.LookPath("busybox")
	// The web container may have been (re)started by the command just run: wait for its httpd.
	var out string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		out, err = l.run(nil, "exec", "sysbox_node.probe", "--", bb, "wget", "-q", "-O", "-", "http://192.0.2.10/index.html")
		if err == nil || !strings.Contains(out, "Connection refused") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(out, "served by "+l.web) {
		l.t.Fatalf("%s: probe → web: got %q", stage, out)
	}
	out = l.must("exec", "sysbox_node."+l.web, "--", "sh", "-c", "echo $TOKEN")
	if strings.TrimSpace(out) != l.secret {
		l.t.Fatalf("%s: web's TOKEN: got %q, want the secret", stage, out)
	}
	err := filepath.Walk(filepath.Join(l.dir, ".sysbox"), func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), l.secret) {
			return fmt.Errorf("%s holds the secret in plaintext", p)
		}
		return err
	})
	if err != nil {
		l.t.Fatalf("%s: %v", stage, err)
	}
}
