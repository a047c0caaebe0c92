package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
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
	_, statErr := os.Stat(filepath.Join(o.DataDir, AdminTokenFile))
	tokenPath, err := Bootstrap(ctx, st, o.DataDir)
	if err != nil {
		return err
	}
	if errors.Is(statErr, fs.ErrNotExist) {
		if err := bootstrapDefault(ctx, st, o.DataDir); err != nil {
			return err
		}
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
	fmt.Fprintf(o.Out, "sysbox server: %s store, admin token in %s\n", st.Kind(), tokenPath)
	if _, err := os.Stat(filepath.Join(o.DataDir, ProjectTokenFile)); err == nil {
		fmt.Fprintf(o.Out, "project %q: token in %s, one-time agent join token in %s\n", DefaultProject,
			filepath.Join(o.DataDir, ProjectTokenFile), filepath.Join(o.DataDir, JoinTokenFile))
	}
	fmt.Fprintf(o.Out, "listening on http://%s\n", ln.Addr())
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

// DefaultProject is the project a first start creates, with ProjectTokenFile and JoinTokenFile
// beside the admin token, so that a first lab needs no API call before `sysbox agent` and
// `sysbox apply --remote`.
const (
	DefaultProject   = "default"
	ProjectTokenFile = "project.token"
	JoinTokenFile    = "join.token"
)

func bootstrapDefault(ctx context.Context, st *store.Store, dataDir string) error {
	p, err := st.CreateProject(ctx, DefaultProject)
	if err != nil {
		return fmt.Errorf("default project: %w", err)
	}
	for _, f := range []struct{ kind, file string }{{store.TokenProject, ProjectTokenFile}, {store.TokenJoin, JoinTokenFile}} {
		tok, _, err := st.CreateToken(ctx, f.kind, p.ID, "bootstrap")
		if err != nil {
			return fmt.Errorf("default project: %w", err)
		}
		if err := durable.WriteFile(filepath.Join(dataDir, f.file), []byte(tok+"\n"), 0o600); err != nil {
			return fmt.Errorf("default project: %w", err)
		}
	}
	return nil
}
