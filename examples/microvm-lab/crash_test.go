package microvmlab_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/executor/exectest"
	"zyvor.dev/sysbox/internal/procfs"
	"zyvor.dev/sysbox/internal/testenv"
)

// TestKillApplyAndReset kills the real sysbox binary (a sysboxtest build, so its failpoints
// work) after every checkpoint record of the example's create with one microVM (vms = 1: few
// checkpoints, every kind of firecracker object: VMM process, TAP, disk copy, snapshot) and of
// that microVM's reset, with the contract-checking simulator as firecracker. After each kill
// `sysbox recover` and an apply must converge, refresh must find everything present, the guest
// must answer `sysbox exec` with its address, and destroy must leave no residue: no node
// directory, TAP, VMM or guest process.
func TestKillApplyAndReset(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/sysbox", "sysboxtest")
	sim := testenv.BuildBinary(t, "zyvor.dev/sysbox/drivers/firecracker/internal/fcsim/cmd/firecracker")
	agent := testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/sysbox-guest")
	sb := exectest.CLI{Bin: bin, Args: []string{"--no-color"}, Env: []string{
		"PATH=" + filepath.Dir(sim) + ":" + os.Getenv("PATH"), "FCSIM_GUEST_AGENT=" + agent,
		"FCSIM_SNAPSHOT_LEDGER=" + filepath.Join(t.TempDir(), "snapshot-ledger"), "SYSBOX_VAR_vms=1"}}
	const vm = "sysbox_node.vm[0]"
	for _, sc := range []struct {
		name  string
		setup bool
		args  []string
	}{
		{"apply", false, []string{"apply", "-auto-approve"}},
		{"reset", true, []string{"reset", vm}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			exectest.KillLoop{Point: executor.PointCheckpoint, Exact: true,
				Run: func(t *testing.T, n int) (exectest.Outcome, int, string) {
					dir := newLab(t, 1<<20)
					t.Cleanup(func() { sb.Run(t, dir, nil, "destroy", "-auto-approve") })
					if sc.setup {
						sb.Must(t, dir, "setup apply", "apply", "-auto-approve")
					}
					r, passed := sb.KillAt(t, dir, executor.PointCheckpoint, n, sc.args...)
					return r, passed, dir
				},
				After: func(t *testing.T, dir, what string) {
					sb.Must(t, dir, what+": recover", "recover")
					// Recovery finishes or undoes what was in flight; the apply converges the rest.
					sb.Must(t, dir, what+": converging apply", "apply", "-auto-approve")
					sb.Settled(t, dir, what)
					r := sb.Run(t, dir, nil, "exec", vm, "--", "ip", "-4", "-o", "addr", "show")
					if r.Code != 0 || !strings.Contains(r.Out, "inet 198.51.100.10/24") {
						t.Fatalf("%s: the recovered guest: %+v; want inet 198.51.100.10/24", what, r)
					}
					lin := lineage(dir)
					if out := sb.Must(t, dir, what+": destroy", "destroy", "-auto-approve"); !strings.Contains(out, "Residue audit: no object") {
						t.Fatalf("%s: destroy:\n%s", what, out)
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
			if exe != b {
				continue
			}
			if st, err := procfs.ReadStat(pid); err == nil && !st.Exited() {
				out = append(out, fmt.Sprintf("%d %s", pid, b))
			}
		}
	}
	return out
}
