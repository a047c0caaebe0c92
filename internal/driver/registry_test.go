package driver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"zyvor.dev/sysbox/pkg/substrate"
)

type execOnly struct{ caps []Capability }

func (e execOnly) Descriptor() Descriptor {
	return Descriptor{Name: "x", Version: "1", Capabilities: e.caps}
}
func (execOnly) Exec(context.Context, substrate.Handle, substrate.ExecRequest) (substrate.ExecResult, error) {
	return substrate.ExecResult{}, nil
}

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	if err := r.Register(execOnly{caps: []Capability{CapGuestExec, CapPolicy}}); err == nil || !strings.Contains(err.Error(), `"policy"`) {
		t.Fatalf("declared-but-unimplemented capability: got %v", err)
	}
	if err := r.Register(execOnly{caps: []Capability{CapGuestExec}}); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(execOnly{caps: []Capability{CapGuestExec}}); err == nil {
		t.Fatal("duplicate accepted")
	}
	if _, err := Get[GuestExec](r, "x", CapGuestExec); err != nil {
		t.Fatal(err)
	}
	var mc *MissingCapabilityError
	err := r.Require("sysbox_node.web", "x", CapNodeLifecycle)
	if !errors.As(err, &mc) || mc.Capability != CapNodeLifecycle || !strings.Contains(err.Error(), "sysbox_node.web") {
		t.Fatalf("missing capability: got %v", err)
	}
	err = r.Require("sysbox_node.web", "docker", CapNodeLifecycle)
	if !errors.As(err, &mc) || !strings.Contains(err.Error(), "known: [x]") {
		t.Fatalf("unknown driver: got %v", err)
	}
}
