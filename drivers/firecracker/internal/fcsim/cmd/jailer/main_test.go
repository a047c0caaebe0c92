package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	dir := t.TempDir()
	fc := filepath.Join(dir, "firecracker-v1")
	other := filepath.Join(dir, "vmm")
	for _, p := range []string{fc, other} {
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a, err := parse([]string{"--id", "fc-a-g1", "--exec-file", fc, "--uid=5", "--gid", "6", "--chroot-base-dir", dir, "--netns", "/run/netns/x", "--", "--api-sock", "/api.sock"})
	if err != nil {
		t.Fatal(err)
	}
	if a.id != "fc-a-g1" || a.exec != fc || a.uid != 5 || a.gid != 6 || a.base != dir || a.netns != "/run/netns/x" || strings.Join(a.extra, " ") != "--api-sock /api.sock" {
		t.Fatalf("parse: got %+v", a)
	}
	if a, err := parse([]string{"--id", "x", "--exec-file", fc, "--uid", "0", "--gid", "0"}); err != nil || a.base != "/srv/jailer" {
		t.Fatalf("default chroot base: got %+v, %v; want /srv/jailer", a, err)
	}
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"--id", "a_b", "--exec-file", fc, "--uid", "0", "--gid", "0"}, `--id "a_b"`},
		{[]string{"--id", strings.Repeat("a", 65), "--exec-file", fc, "--uid", "0", "--gid", "0"}, "1 to 64"},
		{[]string{"--id", "a", "--exec-file", other, "--uid", "0", "--gid", "0"}, `must contain "firecracker"`},
		{[]string{"--id", "a", "--exec-file", fc + "x", "--uid", "0", "--gid", "0"}, "not a regular file"},
		{[]string{"--id", "a", "--exec-file", fc, "--gid", "0"}, "--uid and --gid are required"},
		{[]string{"--id", "a", "--exec-file", fc, "--uid", "x", "--gid", "0"}, `--uid "x"`},
		{[]string{"--id", "a", "--exec-file", fc, "--uid", "0", "--gid", "0", "--chroot-base-dir", "rel"}, "want an absolute path"},
		{[]string{"--id", "a", "--exec-file", fc, "--uid", "0", "--gid", "0", "--daemonize"}, "not simulated"},
		{[]string{"--id", "a", "--exec-file", fc, "--uid", "0", "--gid", "0", "--node", "0"}, "unknown argument"},
		{[]string{"--id"}, "needs a value"},
	} {
		if _, err := parse(tc.argv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.argv, err, tc.want)
		}
	}
}
