package feature

import (
	"errors"
	"fmt"
	"testing"
)

func TestNotSupportedErrorWraps(t *testing.T) {
	err := fmt.Errorf("snapshot: %w", &NotSupportedError{Feature: "BPF batch lookup", Reason: "kernel 5.4"})
	if !errors.Is(err, ErrNotSupported) {
		t.Fatalf("errors.Is(%v, ErrNotSupported) = false", err)
	}
	if got, want := err.Error(), "snapshot: BPF batch lookup: not supported here: kernel 5.4"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
