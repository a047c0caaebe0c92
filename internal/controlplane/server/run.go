package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/wire"
	"zyvor.dev/sysbox/internal/durable"
)

// Options configure Run.
type Options struct {
	DataDir  string        // admin token, server key and (without Postgres) the SQLite database
	Listen   string        // host:port; port 0 picks one
	Postgres string        // a PostgreSQL DSN; empty: SQLite in DataDir
	LeaseTTL time.Duration // 0: 30 s
	Out      io.Writer     // where the listening address and the admin token's path are printed
	Log      *slog.Logger
}

// Run serves until ctx ends: it opens (and migrates) the store, writes the admin token and the
// server key at first start, and prints "listening on http://ADDR" once the socket is open.
func Run(ctx context.Context, o Options) error {
	if err := durable.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("server data dir %s: %w", o.DataDir, err)
	}
	var st *store.Store
	var err error
	if o.Postgres != "" {
		st, err = store.OpenPostgres(ctx, o.Postgres)
	} else {
		st, err = store.OpenSQLite(ctx, filepath.Join(o.DataDir, "controlplane.db"))
	}
	if err != nil {
		return err
	}
	defer st.Close()
	tokenPath, err := Bootstrap(ctx, st, o.DataDir)
	if err != nil {
		return err
	}
	key, err := wire.LoadOrCreateKey(filepath.Join(o.DataDir, ServerKeyFile))
	if err != nil {
		return err
	}
	srv, err := New(st, key, o.Log)
	if err != nil {
		return err
	}
	if o.LeaseTTL > 0 {
		srv.LeaseTTL = o.LeaseTTL
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("server listen %s: %w", o.Listen, err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	hs.RegisterOnShutdown(srv.Close)
	fmt.Fprintf(o.Out, "sysbox server: %s store, admin token in %s\nlistening on http://%s\n", st.Kind(), tokenPath, ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
