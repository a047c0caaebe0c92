package firecracker

import (
	"context"
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
		c := exec.Command("sh", "-c", "while :; do sleep 1; done", "firecracker", "--api-sock", s, "--id", "x")
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
