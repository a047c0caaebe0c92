package firecracker

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
)

func TestConfigure(t *testing.T) {
	d := New(Options{StateDir: t.TempDir()})
	if err := d.Configure(nil); err != nil || d.Binary() != "firecracker" {
		t.Fatalf("no setting: err %v, binary %q, want the PATH default", err, d.Binary())
	}
	if err := d.Configure(map[string]string{"binary": simBinary}); err != nil || d.Binary() != simBinary {
		t.Fatalf("binary setting: err %v, binary %q, want %q", err, d.Binary(), simBinary)
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	d2 := New(Options{})
	if err := d2.Configure(map[string]string{"binary": "sh"}); err != nil || d2.Binary() != sh {
		t.Fatalf("a bare name: err %v, binary %q, want it resolved on PATH to %q", err, d2.Binary(), sh)
	}
	notExec := filepath.Join(t.TempDir(), "firecracker")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		settings map[string]string
		want     string
	}{
		{map[string]string{"bin": simBinary}, `substrate driver "firecracker": unknown setting "bin" (known: binary, chroot_base, gid, jailer, uid)`},
		{map[string]string{"binary": "/nonexistent/firecracker"}, `setting "binary": exec: "/nonexistent/firecracker"`},
		{map[string]string{"binary": notExec}, "permission denied"},
		{map[string]string{"binary": "bin/firecracker"}, `"bin/firecracker": want an absolute path or a name looked up on PATH`},
		{map[string]string{"binary": ""}, `want an absolute path or a name`},
	} {
		err := d.Configure(tc.settings)
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.settings, err, tc.want)
		}
		if d.Binary() != simBinary {
			t.Errorf("%v: a rejected setting changed the binary to %q", tc.settings, d.Binary())
		}
	}
}
