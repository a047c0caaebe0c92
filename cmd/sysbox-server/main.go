// Command sysbox-server is the control plane's API server alone: the same server as `sysbox
// server`, in a binary that links no driver (it holds no host rights; a test checks its
// dependency list).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/server"
)

func main() {
	var o server.Options
	flag.StringVar(&o.DataDir, "data", "sysbox-server", "data `DIR` (admin token, server key, SQLite database)")
	flag.StringVar(&o.Listen, "listen", "127.0.0.1:8787", "listen on `HOST:PORT`")
	flag.DurationVar(&o.LeaseTTL, "lease-ttl", 30*time.Second, "lease TTL granted to agents")
	flag.Parse()
	o.Postgres = os.Getenv("SYSBOX_SERVER_POSTGRES") // a DSN may hold a password: not a flag
	o.Out = os.Stdout
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
