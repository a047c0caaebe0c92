// Package feature holds the module's one "not supported here" error: the host (kernel, daemon,
// backend) lacks a feature an operation needs. It is distinct from invalid input (see
// driver.ErrInvalid): a test may skip only on ErrNotSupported, through the testenv helpers,
// never on an input the code should have refused.
package feature

import (
	"errors"
	"fmt"
)

// ErrNotSupported is wrapped by every "not supported here" error of the module.
var ErrNotSupported = errors.New("not supported here")

// NotSupportedError names the missing feature and why it is missing.
type NotSupportedError struct {
	Feature string
	Reason  string
}

func (e *NotSupportedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("%s: %v", e.Feature, ErrNotSupported)
	}
	return fmt.Sprintf("%s: %v: %s", e.Feature, ErrNotSupported, e.Reason)
}

// Unwrap makes errors.Is(err, ErrNotSupported) true.
func (e *NotSupportedError) Unwrap() error { return ErrNotSupported }
