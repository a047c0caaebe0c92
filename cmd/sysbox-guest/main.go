// Command sysbox-guest is a small static guest agent for sysbox's VM and microVM test images. It
// answers the QEMU guest agent protocol subset of internal/guestagent (guest-sync,
// guest-sync-delimited, guest-ping, guest-info, guest-exec, guest-exec-status,
// guest-network-get-interfaces) on any of:
//
//	-virtio-port NAME  the virtio-serial port NAME (default org.qemu.guest_agent.0), found through
//	                   /sys/class/virtio-ports since a minimal guest has no udev
//	-vsock-port N      an AF_VSOCK listener (Firecracker's vsock)
//	-unix PATH         a unix socket listener (Firecracker's simulator, tests)
//
// Build it with CGO_ENABLED=0. It links nothing of the sysbox runtime (internal/archtest).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"zyvor.dev/sysbox/internal/guestagent"
)

// version is set with -ldflags "-X main.version=…" by scripts/guest-image.
var version = "dev"

func main() {
	port := flag.String("virtio-port", "", "serve the virtio-serial port with this name (e.g. "+guestagent.VirtioPortName+")")
	vsock := flag.Uint("vsock-port", 0, "serve an AF_VSOCK listener on this port")
	unixPath := flag.String("unix", "", "serve a unix socket listener at this path")
	sysDir := flag.String("sys", "/sys/class/virtio-ports", "where virtio-serial ports are listed")
	wait := flag.Duration("wait", 10*time.Second, "how long to wait for the virtio port to appear")
	maxOut := flag.Int("max-output", guestagent.DefaultMaxOutput, "bytes of stdout and of stderr kept per guest-exec")
	flag.Parse()
	if err := run(*port, uint32(*vsock), *unixPath, *sysDir, *wait, *maxOut); err != nil {
		fmt.Fprintln(os.Stderr, "sysbox-guest:", err)
		os.Exit(1)
	}
}

func run(port string, vsock uint32, unixPath, sysDir string, wait time.Duration, maxOut int) error {
	if port == "" && vsock == 0 && unixPath == "" {
		return errors.New("nothing to serve: give -virtio-port, -vsock-port or -unix")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	srv := &guestagent.Server{Version: "sysbox-guest " + version, MaxOutput: maxOut}
	errs := make(chan error, 3)
	n := 0
	if port != "" {
		dev, err := findPort(ctx, sysDir, port, wait)
		if err != nil {
			return err
		}
		n++
		slog.Info("sysbox-guest: serving", "virtio-port", port, "device", dev)
		go func() { errs <- srv.ServeDevice(ctx, dev) }()
	}
	if vsock != 0 {
		l, err := guestagent.ListenVsock(vsock)
		if err != nil {
			return err
		}
		n++
		slog.Info("sysbox-guest: serving", "vsock-port", vsock)
		go func() { errs <- srv.ServeListener(ctx, l) }()
	}
	if unixPath != "" {
		_ = os.Remove(unixPath) // a socket left by an earlier run
		l, err := net.Listen("unix", unixPath)
		if err != nil {
			return err
		}
		n++
		slog.Info("sysbox-guest: serving", "unix", unixPath)
		go func() { errs <- srv.ServeListener(ctx, l) }()
	}
	// Any one endpoint failing ends the agent: its supervisor (the image's init) restarts it.
	for range n {
		if err := <-errs; err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// findPort waits up to wait for the port to show up (its driver may still be probing).
func findPort(ctx context.Context, sysDir, name string, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	for {
		dev, err := guestagent.FindVirtioPort(sysDir, "/dev", name)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return dev, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
