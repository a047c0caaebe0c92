//go:build !sysboxtest

package sysbox

import "fmt"

// Crash-test failpoints (SIGKILL at a chosen durable step) exist only in test builds. A normal
// build refuses to run a command with them set instead of ignoring them: a crash test run
// against the wrong binary must fail, not pass without a crash.
const (
	envExecFailpoint      = "SYSBOX_EXEC_FAILPOINT"
	envExecFailpointTrace = "SYSBOX_EXEC_FAILPOINT_TRACE"
)

func (a *App) executorFailpoints() (func(point string), error) {
	for _, k := range []string{envExecFailpoint, envExecFailpointTrace} {
		if v, ok := a.Env.LookupEnv(k); ok && v != "" {
			return nil, fmt.Errorf("%s is set, but this sysbox is not a test build (build tag sysboxtest): refusing to run; unset it", k)
		}
	}
	return nil, nil
}
