// Package exectest holds helpers for crash tests that run a sysbox process (the CLI or a test
// binary re-executed as a helper) which a failpoint or the test may kill.
package exectest

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
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
