// Command sysbox builds declarative network labs. All logic lives in internal/cli/sysbox.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"zyvor.dev/sysbox/internal/cli/sysbox"
	"zyvor.dev/sysbox/internal/plans"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

func main() {
	stopProfiles := startProfiles()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := &sysbox.Env{
		Stdout: os.Stdout, Stderr: os.Stderr, Stdin: os.Stdin,
		Environ: os.Environ(), LookupEnv: os.LookupEnv,
		IsTTY:   sysbox.IsTerminal(os.Stdout),
		Version: version,
		Drivers: func() (plans.CapabilityChecker, error) { return sysbox.DriverRegistry(os.LookupEnv) },
	}
	code := sysbox.Main(ctx, env, os.Args[1:])
	stop()
	stopProfiles()
	os.Exit(code)
}
