package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/internal/testenv"
)

// TestAgentBinaryOnUnixSocket runs the built agent as a process on a unix socket: guest-info
// names it, exec runs argv, SIGTERM ends it cleanly.
func TestAgentBinaryOnUnixSocket(t *testing.T) {
	bin := testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/sysbox-guest")
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(bin, "-unix", sock)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var st *guestagent.Stream
	for {
		var err error
		if st, err = guestagent.DialUnix(ctx, sock); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("agent socket never came up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	defer st.Close()
	c := guestagent.NewClient(st)
	info, err := c.Info(ctx)
	if err != nil || !strings.HasPrefix(info.Version, "sysbox-guest ") {
		t.Fatalf("guest-info: got %+v, %v; want version sysbox-guest …", info, err)
	}
	out, err := c.Run(ctx, "echo", "hi")
	if err != nil || string(out.OutData) != "hi\n" {
		t.Fatalf("exec echo: got %q, %v", out.OutData, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("after SIGTERM: %v, want exit 0", err)
		}
	case <-ctx.Done():
		t.Fatal("agent did not exit after SIGTERM")
	}
}

func TestAgentRefusesNothingToServe(t *testing.T) {
	if err := run("", 0, "", "", 0, 0); err == nil {
		t.Fatal("no endpoint: got no error")
	}
}
