package exectest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/executor/failpoint"
)

// CLI runs one sysbox binary in lab directories, as crash tests do before and after each kill.
type CLI struct {
	Bin  string
	Args []string // put before every run's own arguments (e.g. --no-color)
	Env  []string // added to the test process's environment for every run
}

// Run runs the binary in dir with env added; the outcome is the caller's to judge.
func (c CLI) Run(t testing.TB, dir string, env []string, args ...string) Outcome {
	t.Helper()
	cmd := exec.Command(c.Bin, append(slices.Clone(c.Args), args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), c.Env...), env...)
	return Run(t, fmt.Sprintf("sysbox %v", args), cmd)
}

// Must runs args in dir and fails the test, naming what, unless the run exits 0. It returns
// the run's output.
func (c CLI) Must(t testing.TB, dir, what string, args ...string) string {
	t.Helper()
	r := c.Run(t, dir, nil, args...)
	if r.Killed || r.Code != 0 {
		t.Fatalf("%s: sysbox %v: killed=%v exit=%d\n%s", what, args, r.Killed, r.Code, r.Out)
	}
	return r.Out
}

// KillAt runs args in dir with the failpoint armed to kill the process at its nth pass of
// point, and returns how the run ended and how many passes it made (a KillLoop's Run).
func (c CLI) KillAt(t *testing.T, dir, point string, n int, args ...string) (Outcome, int) {
	t.Helper()
	trace := filepath.Join(t.TempDir(), "trace")
	r := c.Run(t, dir, []string{failpoint.EnvTrace + "=" + trace, failpoint.EnvSpec + "=" + point + "@" + strconv.Itoa(n)}, args...)
	return r, Traced(t, trace, point)
}

// Settled checks a lab after recovery and a converging apply: `refresh` observes every
// resource present, and a second `recover` finds nothing to do.
func (c CLI) Settled(t *testing.T, dir, what string) {
	t.Helper()
	out := c.Must(t, dir, what+": refresh", "refresh")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "sysbox_") && !strings.HasSuffix(line, ": present") {
			t.Fatalf("%s: after recovery: %s\n%s", what, line, out)
		}
	}
	if r := c.Run(t, dir, nil, "recover"); r.Killed || r.Code != 0 || !strings.Contains(r.Out, "Nothing to recover") {
		t.Fatalf("%s: second recover: killed=%v exit=%d\n%s", what, r.Killed, r.Code, r.Out)
	}
}
