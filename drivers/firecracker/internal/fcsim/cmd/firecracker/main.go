// Command firecracker is the test stand-in for the Firecracker VMM (see package fcsim). It takes
// the flags the driver passes to the real binary, `--api-sock PATH --id ID`, serves the API on
// PATH and runs until SIGTERM, SIGINT or SIGKILL. FCSIM_REQUEST_LOG names a file that receives
// one JSON line per request (appended). The simulated guest (see devices.go) runs sysbox-guest:
// FCSIM_GUEST_AGENT names it, else sysbox-guest beside this binary is used.
// FCSIM_SNAPSHOT_LEDGER names a file shared by all simulator processes that refuses a second
// restore of one snapshot.
//
// Under the jailer stand-in (../jailer) it also takes what the jailer passes (--start-time-us,
// --start-time-cpu-us, --parent-cpu-time-us: ignored) and the stand-in's plumbing, since the
// jail hides host paths and the jailer clears the environment: --fcsim-guest-helper-fd (the
// guest helper, see helper.go), --fcsim-request-log-fd and --fcsim-ledger-fd (the request log
// and snapshot ledger, opened before the chroot). --fcsim-guest-helper DIR makes the process
// the guest helper itself, serving the connection on descriptor 3; --fcsim-owner UID:GID is
// the jailed VMM's.
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
	fs.String("start-time-us", "", "jailer: its start time (ignored)")
	fs.String("start-time-cpu-us", "", "jailer: its CPU start time (ignored)")
	fs.String("parent-cpu-time-us", "", "jailer: its parent's CPU time (ignored)")
	helperFD := fs.Int("fcsim-guest-helper-fd", -1, "jailer stand-in: descriptor of the guest helper connection")
	logFD := fs.Int("fcsim-request-log-fd", -1, "jailer stand-in: descriptor of the request log")
	ledgerFD := fs.Int("fcsim-ledger-fd", -1, "jailer stand-in: descriptor of the snapshot ledger")
	helperDir := fs.String("fcsim-guest-helper", "", "run as the guest helper; the guest directory on the host")
	helperOwner := fs.String("fcsim-owner", "", "guest helper: the jailed VMM's UID:GID")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if *helperDir != "" {
		var uid, gid int
		if _, err := fmt.Sscanf(*helperOwner, "%d:%d", &uid, &gid); err != nil {
			return fmt.Errorf("--fcsim-owner %q: want UID:GID", *helperOwner)
		}
		return runHelper(os.NewFile(3, "guest-helper"), *helperDir, uid, gid)
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
	if *logFD >= 0 {
		f := os.NewFile(uintptr(*logFD), "request-log")
		defer f.Close()
		logw = f
	}
	opts := fcsim.Options{ID: *id, RequestLog: logw, SnapshotLedger: os.Getenv("FCSIM_SNAPSHOT_LEDGER")}
	if *ledgerFD >= 0 {
		opts.SnapshotLedgerFile = os.NewFile(uintptr(*ledgerFD), "snapshot-ledger")
	}
	dev := newDevices(*id, *sock)
	if *helperFD >= 0 {
		dev.helper = &guestHelper{f: os.NewFile(uintptr(*helperFD), "guest-helper")}
	}
	defer dev.close()
	opts.Hooks = fcsim.Hooks{Start: dev.start, Pause: dev.pause}
	if _, err := os.Stat("/sys/class/net"); err != nil {
		// Jailed: no /sys. Firecracker opens the TAP when the interface is configured; so
		// does this check (an unprivileged TUNSETIFF cannot create a missing one).
		opts.TapExists = probeTAP
	}
	sim, err := fcsim.New(opts)
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
