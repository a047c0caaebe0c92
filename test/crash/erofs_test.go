package crash

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/executor/failpoint"
	"zyvor.dev/sysbox/internal/testenv"
)

// TestReadOnlyStateDirMidRun stops the real binary (test build: SIGSTOP failpoint) right after a
// checkpoint record or state save of apply and of reset, makes .sysbox/ (state and checkpoint
// log, on a tmpfs) read-only, and lets it go on. The command must fail naming the file under
// .sysbox/ and EROFS; the durable state must still read as valid; once .sysbox/ is writable
// again, `sysbox recover` and the next apply must converge with state and world in agreement.
func TestReadOnlyStateDirMidRun(t *testing.T) {
	testenv.RequireRoot(t)
	lab := func(t *testing.T, applied bool) string {
		dir := newLab(t)
		mnt := filepath.Join(dir, ".sysbox")
		if err := os.Mkdir(mnt, 0o700); err != nil {
			t.Fatal(err)
		}
		testenv.MountTmpfs(t, mnt, 1024)
		if applied {
			must(t, run(t, dir, nil, "apply", "-auto-approve"), "setup apply")
		}
		return dir
	}
	scenarios := []struct {
		name    string
		applied bool
		args    []string
	}{
		{"apply", false, []string{"apply", "-auto-approve"}},
		{"reset", true, []string{"reset", "sysbox_node.web[0]"}},
	}
	for _, sc := range scenarios {
		// A clean traced run counts the points; the faults go at the first, a middle and the
		// last checkpoint record and the first and last state save.
		dir := lab(t, sc.applied)
		trace := filepath.Join(t.TempDir(), "trace")
		must(t, run(t, dir, []string{failpoint.EnvTrace + "=" + trace}, sc.args...), sc.name+": traced run")
		n, err := failpoint.Count(trace)
		if err != nil {
			t.Fatal(err)
		}
		cp, st := n[executor.PointCheckpoint], n[executor.PointState]
		if cp < 3 || st < 1 {
			t.Fatalf("%s: traced run passed %d checkpoint records and %d state saves", sc.name, cp, st)
		}
		points := []string{executor.PointCheckpoint + "@1", fmt.Sprintf("%s@%d", executor.PointCheckpoint, (cp+1)/2),
			fmt.Sprintf("%s@%d", executor.PointCheckpoint, cp), executor.PointState + "@1", fmt.Sprintf("%s@%d", executor.PointState, st)}
		seen := map[string]bool{}
		for _, pt := range points {
			if seen[pt] {
				continue
			}
			seen[pt] = true
			t.Run(sc.name+"/"+pt, func(t *testing.T) {
				// Checkpoint records come in a fixed number, state saves do not: the saver
				// coalesces changes that arrive while it writes, so a run may save fewer times
				// than the traced one. When a later state save never comes, the next try (on
				// a fresh lab) stops at the one before it, down to the first (a run traced
				// with 2 saves may save once; every run saves at least once).
				tries := []string{pt}
				if k := st; pt == fmt.Sprintf("%s@%d", executor.PointState, st) {
					for k--; k >= 1; k-- {
						tries = append(tries, fmt.Sprintf("%s@%d", executor.PointState, k))
					}
				}
				var dir string
				var c *exec.Cmd
				var out *strings.Builder
				var exited chan struct{}
				for i, at := range tries {
					var stopped bool
					if dir, c, out, exited, stopped = startStopped(t, sc.applied, lab, sc.args, at); stopped {
						break
					}
					if i == len(tries)-1 {
						t.Fatalf("never stopped at %s:\n%s", strings.Join(tries, " or "), out.String())
					}
					t.Logf("this run saved state fewer times than the traced one; trying %s", tries[i+1])
				}
				mnt := filepath.Join(dir, ".sysbox")
				how, writable := testenv.ReadOnly(t, mnt)
				if err := c.Process.Signal(unix.SIGCONT); err != nil {
					t.Fatal(err)
				}
				<-exited
				code := c.ProcessState.ExitCode()
				named := ""
				for _, l := range strings.Split(out.String(), "\n") {
					if strings.Contains(l, "read-only file system") && strings.Contains(l, ".sysbox/") {
						named = strings.TrimSpace(l)
					}
				}
				if code == 0 || named == "" {
					t.Fatalf("%s at %s on a read-only .sysbox/ (%s): exit %d; the error must name the file under .sysbox/ and EROFS:\n%s",
						sc.name, pt, how, code, out.String())
				}
				t.Logf("%s at %s (%s): exit %d: %s", sc.name, pt, how, code, named)
				writable()
				_ = readState(t, dir) // fails the test if the durable state does not read as valid
				recoverAndApply(t, dir, "once .sysbox/ is writable again")
			})
		}
	}
}

// startStopped starts the test binary on a fresh lab with a stop failpoint at pt and waits
// until it stops there (stopped) or exits first.
func startStopped(t *testing.T, applied bool, lab func(*testing.T, bool) string, args []string, pt string) (
	dir string, c *exec.Cmd, out *strings.Builder, exited chan struct{}, stopped bool) {
	t.Helper()
	dir = lab(t, applied)
	c = exec.Command(binary, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "SYSBOX_TEST_FAKE_WORLD="+filepath.Join(dir, "world.json"), "WEB_TOKEN="+secret,
		failpoint.EnvSpec+"="+pt, failpoint.EnvAction+"=stop")
	out = &strings.Builder{}
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan struct{})
	go func() { _ = c.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		<-exited
	})
	return dir, c, out, exited, testenv.WaitStopped(t, c.Process.Pid, exited)
}
