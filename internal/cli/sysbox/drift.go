package sysbox

import (
	"errors"

	"zyvor.dev/sysbox/internal/driver"
)

// driftHint says what to do when a run failed because an object the state records is gone or
// not running (a driver's driver.ErrNotFound): apply and reset act on the state as last saved
// and do not observe the host first; refresh records what is there, so that the next plan
// repairs it.
const driftHint = "The host differs from the state (an object it records is gone or not running): " +
	"run `sysbox refresh` to record what is there, then `sysbox apply` to repair it (`sysbox plan` shows how)."

// hintedError is err followed by a line saying what to do; it unwraps to err (exit codes and
// errors.Is see the cause).
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() + "\n" + e.hint }
func (e *hintedError) Unwrap() error { return e.err }

// withDriftHint ends err with driftHint when a driver reported an object missing.
func withDriftHint(err error) error {
	if err == nil || !errors.Is(err, driver.ErrNotFound) {
		return err
	}
	return &hintedError{err: err, hint: driftHint}
}
