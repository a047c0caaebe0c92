// Package exectest holds helpers for crash tests that run a sysbox process (the CLI or a test
// binary re-executed as a helper) which a failpoint or the test may kill.
package exectest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"zyvor.dev/sysbox/internal/executor/failpoint"
)

// Outcome is how a child process ended.
type Outcome struct {
	Killed bool   // ended by SIGKILL
	Code   int    // exit code, when not killed
	Out    string // combined stdout and stderr
}

// Run runs c to its end and collects its combined output. A process that could not be run or
// waited for fails the test, reported as what.
func Run(t testing.TB, what string, c *exec.Cmd) Outcome {
	t.Helper()
	out, err := c.CombinedOutput()
	r := Outcome{Out: string(out)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		ws := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			r.Killed = true
		} else {
			r.Code = ee.ExitCode()
		}
	default:
		t.Fatalf("%s: %v", what, err)
	}
	return r
}

// MaxKillPoints bounds every kill loop; reaching it fails the test rather than leaving points
// untested.
const MaxKillPoints = 500

// KillLoop kills a command at each point of one class in turn: point@1, point@2, … until a
// run ends on its own.
type KillLoop struct {
	Point string
	// Exact says every uninterrupted run passes the same number of points (checkpoint records,
	// driver mutations); false for state saves, which are batched by timing.
	Exact bool
	// Run runs the command on a fresh copy of the starting directory, killed at the nth point.
	// It returns how the run ended, how many points of the class it passed and survived, and
	// the directory.
	Run func(t *testing.T, n int) (r Outcome, passed int, dir string)
	// After checks a killed run's directory (recover, agree, converge).
	After func(t *testing.T, dir, what string)
}

// Kill runs the loop and returns the number of kills. A killed run must have died at exactly
// its nth point, and the run that ended on its own must have passed fewer than n points (for
// Exact classes exactly as many as were killed), so the kills made are the points enumerated.
// No kill at all, a run that fails, or reaching MaxKillPoints fails the test.
func (k KillLoop) Kill(t *testing.T, what string) int {
	t.Helper()
	kills := 0
	for n := 1; ; n++ {
		if n > MaxKillPoints {
			t.Fatalf("%s still killed at %s@%d: more points than the test's bound", what, k.Point, MaxKillPoints)
		}
		r, passed, dir := k.Run(t, n)
		if !r.Killed {
			if r.Code != 0 {
				t.Fatalf("%s with %s@%d: exit %d: %s", what, k.Point, n, r.Code, r.Out)
			}
			if passed >= n || (k.Exact && passed != kills) {
				t.Fatalf("%s with %s@%d ended on its own after passing %d points; %d kills made", what, k.Point, n, passed, kills)
			}
			break
		}
		killed := fmt.Sprintf("%s killed at %s@%d", what, k.Point, n)
		if passed != n-1 {
			t.Fatalf("%s: killed after passing %d points, want %d", killed, passed, n-1)
		}
		kills++
		k.After(t, dir, killed)
	}
	if kills == 0 {
		t.Fatalf("%s passes no %s point", what, k.Point)
	}
	t.Logf("%s: %d %s kill points", what, kills, k.Point)
	return kills
}

// Traced reads how often point was passed from a failpoint trace file (0 without one).
func Traced(t *testing.T, trace, point string) int {
	t.Helper()
	if _, err := os.Stat(trace); errors.Is(err, os.ErrNotExist) {
		return 0
	}
	counts, err := failpoint.Count(trace)
	if err != nil {
		t.Fatal(err)
	}
	return counts[point]
}
