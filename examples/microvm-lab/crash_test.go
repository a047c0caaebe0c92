package microvmlab_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/executor/exectest"
	"zyvor.dev/sysbox/internal/executor/failpoint"
	"zyvor.dev/sysbox/internal/testenv"
)

// crashTopology is one microVM on a LAN: few checkpoints, every kind of firecracker object
// (VMM process, TAP, disk copy, snapshot).
const crashTopology = `
substrate "local" {
  driver "netns" {}
  driver "firecracker" {}
  backend "local" { path = ".sysbox/state" }
}

resource "sysbox_artifact" "rootfs" {
  driver = "firecracker"
  kind   = "rootfs"
  source = "images/rootfs.ext4"
}

resource "sysbox_artifact" "vmlinux" {
  driver = "firecracker"
  kind   = "kernel"
  source = "images/vmlinux"
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}

resource "sysbox_node" "vm" {
  driver    = "firecracker"
  artifact  = sysbox_artifact.rootfs
  kernel    = sysbox_artifact.vmlinux
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.10/24"]
    gateway = "198.51.100.1"
  }
}
`

// TestKillApplyAndReset kills the real sysbox binary (a sysboxtest build, so its failpoints
// work) after every checkpoint record of a microVM's create and of its reset, with the
// contract-checking simulator as firecracker. After each kill `sysbox recover` and an apply
// must converge, refresh must find everything present, the guest must answer `sysbox exec` with its
// address, and destroy must leave no residue: no node directory, TAP, VMM or guest process.
func TestKillApplyAndReset(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/sysbox", "sysboxtest")
	sim := testenv.BuildBinary(t, "zyvor.dev/sysbox/drivers/firecracker/internal/fcsim/cmd/firecracker")
	agent := testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/sysbox-guest")
	ledger := filepath.Join(t.TempDir(), "snapshot-ledger")
	sb := func(t *testing.T, dir string, env []string, args ...string) exectest.Outcome {
		t.Helper()
		c := exec.Command(bin, append([]string{"--no-color"}, args...)...)
		c.Dir = dir
		c.Env = append(os.Environ(), "PATH="+filepath.Dir(sim)+":"+os.Getenv("PATH"), "FCSIM_GUEST_AGENT="+agent,
			"FCSIM_SNAPSHOT_LEDGER="+ledger)
		c.Env = append(c.Env, env...)
		return exectest.Run(t, fmt.Sprintf("sysbox %v", args), c)
	}
	ok := func(t *testing.T, r exectest.Outcome, what string) {
		t.Helper()
		if r.Killed || r.Code != 0 {
			t.Fatalf("%s: killed=%v exit=%d\n%s", what, r.Killed, r.Code, r.Out)
		}
	}
	lab := func(t *testing.T) string {
		dir := t.TempDir()
		must(t, os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(crashTopology), 0o644))
		must(t, os.MkdirAll(filepath.Join(dir, "images"), 0o755))
		rootfs := filepath.Join(dir, "images", "rootfs.ext4")
		must(t, os.WriteFile(rootfs, []byte("an ext4 image stands here"), 0o644))
		must(t, os.Truncate(rootfs, 1<<20))
		must(t, os.WriteFile(filepath.Join(dir, "images", "vmlinux"), []byte("\x7fELF guest kernel"), 0o644))
		return dir
	}
	for _, sc := range []struct {
		name  string
		setup bool
		args  []string
	}{
		{"apply", false, []string{"apply", "-auto-approve"}},
		{"reset", true, []string{"reset", "sysbox_node.vm"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			exectest.KillLoop{Point: executor.PointCheckpoint, Exact: true,
				Run: func(t *testing.T, n int) (exectest.Outcome, int, string) {
					dir := lab(t)
					t.Cleanup(func() { sb(t, dir, nil, "destroy", "-auto-approve") })
					if sc.setup {
						ok(t, sb(t, dir, nil, "apply", "-auto-approve"), "setup apply")
					}
					trace := filepath.Join(t.TempDir(), "trace")
					r := sb(t, dir, []string{failpoint.EnvTrace + "=" + trace, failpoint.EnvSpec + "=" + executor.PointCheckpoint + "@" + strconv.Itoa(n)}, sc.args...)
					return r, exectest.Traced(t, trace, executor.PointCheckpoint), dir
				},
				After: func(t *testing.T, dir, what string) {
					ok(t, sb(t, dir, nil, "recover"), what+": recover")
					// Recovery finishes or undoes what was in flight; the apply converges the rest.
					ok(t, sb(t, dir, nil, "apply", "-auto-approve"), what+": converging apply")
					r := sb(t, dir, nil, "refresh")
					ok(t, r, what+": refresh")
					for _, line := range strings.Split(strings.TrimSpace(r.Out), "\n") {
						if strings.HasPrefix(line, "sysbox_") && !strings.HasSuffix(line, ": present") {
							t.Fatalf("%s: after recovery: %s\n%s", what, line, r.Out)
						}
					}
					r = sb(t, dir, nil, "exec", "sysbox_node.vm", "--", "ip", "-4", "-o", "addr", "show")
					if r.Code != 0 || !strings.Contains(r.Out, "inet 198.51.100.10/24") {
						t.Fatalf("%s: the recovered guest: %+v; want inet 198.51.100.10/24", what, r)
					}
					if r := sb(t, dir, nil, "recover"); r.Code != 0 || !strings.Contains(r.Out, "Nothing to recover") {
						t.Fatalf("%s: second recover: %+v", what, r)
					}
					lin := lineage(dir)
					if r := sb(t, dir, nil, "destroy", "-auto-approve"); r.Code != 0 || !strings.Contains(r.Out, "Residue audit: no object") {
						t.Fatalf("%s: destroy: %+v", what, r)
					}
					if objs := residue(lin); len(objs) > 0 {
						t.Fatalf("%s: residue after destroy: %v", what, objs)
					}
					if procs := gone(sim, agent); len(procs) > 0 {
						t.Fatalf("%s: processes left after destroy: %v", what, procs)
					}
				}}.Kill(t, strings.Join(sc.args, " "))
		})
	}
}

// gone waits (bounded) for every process executing one of bins to end and returns those still
// running. A guest agent gets SIGKILL when its VMM dies, an instant later than the VMM (seconds
// later on a loaded host).
func gone(bins ...string) []string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		procs := running(bins...)
		if len(procs) == 0 || time.Now().After(deadline) {
			return procs
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// running lists live processes (not zombies) executing one of bins.
func running(bins ...string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil {
			continue
		}
		for _, b := range bins {
			if exe == b {
				stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
				if i := bytes.LastIndexByte(stat, ')'); i > 0 && len(stat) > i+2 && stat[i+2] == 'Z' {
					continue
				}
				out = append(out, fmt.Sprintf("%d %s", pid, b))
			}
		}
	}
	return out
}
