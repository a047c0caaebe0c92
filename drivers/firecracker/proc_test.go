package firecracker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A VMM process started for a node's socket by a run killed before it recorded the pid is
// found by its --api-sock and ended; a process serving another socket is left alone.
func TestKillStrays(t *testing.T) {
	dir := t.TempDir()
	sock, other := filepath.Join(dir, "a", apiSock), filepath.Join(dir, "b", apiSock)
	start := func(s string) (*exec.Cmd, chan struct{}) {
		c := idle(t, "firecracker", "--api-sock", s, "--id", "x")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		t.Cleanup(func() { _ = c.Process.Kill(); <-done })
		return c, done
	}
	_, strayDone := start(sock)
	_, otherDone := start(other)
	if got := serving(sock); len(got) != 1 {
		t.Fatalf("serving(%s) = %v, want the one stray", sock, got)
	}
	if err := killStrays(context.Background(), "x", sock); err != nil {
		t.Fatal(err)
	}
	select {
	case <-strayDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the stray serving the node's socket is still running")
	}
	select {
	case <-otherDone:
		t.Fatal("a process serving another socket was killed")
	default:
	}
	if got := serving(sock); len(got) != 0 {
		t.Fatalf("serving(%s) after killStrays = %v", sock, got)
	}
}

// A jailer that has not exec'd its VMM yet (a run killed right after starting it) serves the
// node's chroot socket by its --id and --chroot-base-dir; one of another id or base does not.
func TestServingJailerPhase(t *testing.T) {
	base := t.TempDir()
	sock := filepath.Join(base, "firecracker", "fc-a-g1", "root", apiSock)
	start := func(id, b string) int {
		c := idle(t, "jailer", "--id", id, "--exec-file", "/x/firecracker",
			"--uid", "1", "--gid", "1", "--chroot-base-dir", b, "--", "--api-sock", "/"+apiSock)
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		t.Cleanup(func() { _ = c.Process.Kill(); <-done })
		return c.Process.Pid
	}
	ours := start("fc-a-g1", base)
	start("fc-a-g2", base)
	start("fc-a-g1", base+"x")
	if got := serving(sock); len(got) != 1 || got[0] != ours {
		t.Fatalf("serving(%s) = %v, want only the jailer of that id and base (pid %d)", sock, got, ours)
	}
}

// idle is a process whose command line carries args and that never forks (a shell's "read"
// builtin on a pipe nobody writes): a forking loop would show a second process with the same
// command line for a moment, between its fork and its child's exec.
func idle(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	c := exec.Command("sh", append([]string{"-c", "read x"}, args...)...)
	c.Stdin = r
	return c
}
