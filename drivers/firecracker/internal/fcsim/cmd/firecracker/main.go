// Command firecracker is the test stand-in for the Firecracker VMM (see package fcsim). It takes
// the flags the driver passes to the real binary, `--api-sock PATH --id ID`, serves the API on
// PATH and runs until SIGTERM, SIGINT or SIGKILL. FCSIM_REQUEST_LOG names a file that receives
// one JSON line per request (appended). The simulated guest (see devices.go) runs sysbox-guest:
// FCSIM_GUEST_AGENT names it, else sysbox-guest beside this binary is used.
// FCSIM_SNAPSHOT_LEDGER names a file shared by all simulator processes that refuses a second
// restore of one snapshot.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"zyvor.dev/sysbox/drivers/firecracker/internal/fcsim"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fcsim:", err)
		os.Exit(1)
	}
}

func run() error {
	fs := flag.NewFlagSet("firecracker", flag.ContinueOnError)
	sock := fs.String("api-sock", "", "path of the API unix socket")
	id := fs.String("id", "anonymous-instance", "microVM id")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *sock == "" {
		return errors.New("--api-sock is required (fcsim always serves the API)")
	}
	var logw io.Writer
	if p := os.Getenv("FCSIM_REQUEST_LOG"); p != "" {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("request log: %w", err)
		}
		defer f.Close()
		logw = f
	}
	dev := newDevices(*id, *sock)
	defer dev.close()
	sim, err := fcsim.New(fcsim.Options{ID: *id, RequestLog: logw, Hooks: fcsim.Hooks{Start: dev.start, Pause: dev.pause},
		SnapshotLedger: os.Getenv("FCSIM_SNAPSHOT_LEDGER")})
	if err != nil {
		return err
	}
	// Like Firecracker: an existing socket path is an error, never silently replaced.
	ln, err := net.Listen("unix", *sock)
	if err != nil {
		return fmt.Errorf("failed to open the API socket %s: %w", *sock, err)
	}
	srv := &http.Server{Handler: sim}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
