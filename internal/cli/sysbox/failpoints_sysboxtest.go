//go:build sysboxtest

package sysbox

import (
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/executor/failpoint"
)

// executorFailpoints returns the executor's AfterDurable hook built from SYSBOX_EXEC_FAILPOINT
// (crash tests: kill the process after the Nth checkpoint record or state save) and
// SYSBOX_EXEC_FAILPOINT_TRACE; nil when neither is set. An unknown point name is an error.
// Only test builds (build tag sysboxtest) carry this; see failpoints_release.go.
func (a *App) executorFailpoints() (func(point string), error) {
	fp, err := failpoint.FromEnv(a.Env.LookupEnv, executor.FailPoints)
	if err != nil || fp == nil {
		return nil, err
	}
	return fp.Hit, nil
}
