package executor

import (
	"context"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/local"
	"zyvor.dev/sysbox/internal/backend/postgres"
	"zyvor.dev/sysbox/internal/backend/sqlite"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/internal/testenv"
)

// TestExecutorOnEveryBackend runs apply, replace, reset and destroy through the real state
// backends (via backend.Manager.Store): group-committed CAS saves, snapshots and locking must
// hold on each. PostgreSQL is the daemon tier (SYSBOX_TEST_PG_DSN).
func TestExecutorOnEveryBackend(t *testing.T) {
	open := map[string]func(t *testing.T, dir string) backend.Backend{
		"local": func(t *testing.T, dir string) backend.Backend {
			b, err := local.New(filepath.Join(dir, "state"))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		"sqlite": func(t *testing.T, dir string) backend.Backend {
			b, err := sqlite.New(context.Background(), filepath.Join(dir, "state.db"), "exec-test")
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		"postgres": func(t *testing.T, dir string) backend.Backend {
			dsn := testenv.RequireEnv(t, "SYSBOX_TEST_PG_DSN")
			b, err := postgres.New(context.Background(), dsn, "exec-test-"+filepath.Base(dir))
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
	}
	for _, kind := range []string{"local", "sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t)
			be := open[kind](t, h.dir)
			t.Cleanup(func() { be.Close() })
			mgr := backend.NewManager(be, backend.Options{})
			h.ex.State = mgr.Store()
			h.ex.Parallelism = 8
			read := func() *states.State {
				st, err := mgr.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			desired := topology(3, 12, true)
			ctx := context.Background()
			if _, err := h.ex.Apply(ctx, &Request{Actions: planFor(nil, desired)}); err != nil {
				t.Fatal(err)
			}
			checkAgree(t, read(), h.fake)
			// Replacing a network under nodes that stay fails (the driver refuses to delete a
			// network with NICs on it; the planner would replace the dependents too): the failure
			// must leave state and world consistent.
			if _, err := h.ex.Apply(ctx, &Request{Actions: planFor(read(), desired, "sysbox_network.lan[2]")}); err == nil {
				t.Fatal("replacing a network with attached nodes succeeded")
			}
			checkAgree(t, read(), h.fake)
			if _, err := h.ex.Apply(ctx, &Request{Actions: planFor(read(), desired, "sysbox_node.web[3]")}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.ex.Reset(ctx, ResetRequest{Targets: []addrs.Instance{mustAddr("sysbox_node.web[0]"), mustAddr("sysbox_node.web[5]")}, Desired: desired}); err != nil {
				t.Fatal(err)
			}
			checkAgree(t, read(), h.fake)
			if _, residue, err := h.ex.Destroy(ctx, nil); err != nil || len(residue) != 0 {
				t.Fatalf("destroy: %v %v", err, residue)
			}
			if st := read(); len(st.Resources) != 0 {
				t.Fatalf("state after destroy: %v", st.Addresses())
			}
			if d, ok := be.(backend.Deleter); ok { // leave nothing in a shared database
				if err := d.Delete(ctx, read().Serial); err != nil {
					t.Errorf("delete state: %v", err)
				}
			}
			if sn, ok := be.(backend.Snapshotter); ok {
				list, err := sn.Snapshots(ctx)
				if err != nil || len(list) == 0 {
					t.Fatalf("snapshots before destructive runs: got %d, %v", len(list), err)
				}
			}
		})
	}
}
