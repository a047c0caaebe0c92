package guestagent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindVirtioPort(t *testing.T) {
	sys, dev := t.TempDir(), t.TempDir()
	for port, name := range map[string]string{"vport0p0": "", "vport1p1": "org.other\n", "vport1p2": VirtioPortName + "\n"} {
		if err := os.MkdirAll(filepath.Join(sys, port), 0o755); err != nil {
			t.Fatal(err)
		}
		if name != "" {
			if err := os.WriteFile(filepath.Join(sys, port, "name"), []byte(name), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dev, "vport1p2"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := FindVirtioPort(sys, dev, VirtioPortName)
	if err != nil || got != filepath.Join(dev, "vport1p2") {
		t.Fatalf("got %q, %v; want %s", got, err, filepath.Join(dev, "vport1p2"))
	}
	_, err = FindVirtioPort(sys, dev, "org.absent")
	if err == nil || !strings.Contains(err.Error(), "vport1p1=org.other") {
		t.Fatalf("absent port: got %v, want an error listing the ports", err)
	}
	// The node is missing and the port's dev file is broken: refused, naming the file.
	if err := os.Remove(filepath.Join(dev, "vport1p2")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sys, "vport1p2", "dev"), []byte("x:y\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := FindVirtioPort(sys, dev, VirtioPortName); err == nil || !strings.Contains(err.Error(), "bad device number") {
		t.Fatalf("broken dev file: got %v, want bad device number", err)
	}
}

func TestServeListener(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	path := filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- (&Server{}).ServeListener(ctx, l) }()
	for range 2 { // a second connection after the first hung up
		st, err := DialUnix(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := NewClient(st).Ping(ctx); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("after cancel: got %v, want context.Canceled", err)
	}
}
