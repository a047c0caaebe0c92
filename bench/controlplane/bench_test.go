// Package controlplane benchmarks the control plane's API with real signed agents over HTTP on
// loopback: runs claimed per second and events ingested per second, on SQLite and on
// PostgreSQL (SYSBOX_TEST_PG_DSN), while 50 agents heartbeat. remote.sh sets a 20-node netns
// apply through the control plane beside the local CLI's; fixed.sh a no-op command's cost.
// Not a timed test: run with
//
//	go test -run '^$' -bench . ./bench/controlplane/
package controlplane

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/client"
	"zyvor.dev/sysbox/internal/controlplane/server"
	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/store/storetest"
	"zyvor.dev/sysbox/internal/testenv"
)

const agents = 50

// logTo receives the server's errors (a benchmark that meets one fails).
var logTo io.Writer = os.Stderr

var ctx = context.Background()

// rig is a server on db with a project, a workspace, a plan and 50 joined agents that
// heartbeat every heartbeat until the benchmark ends.
type rig struct {
	st      *store.Store
	project string
	plan    string
	agents  []*client.Agent
	beats   atomic.Int64
}

func newRig(b *testing.B, db string, heartbeat time.Duration) *rig {
	b.Helper()
	var st *store.Store
	var err error
	switch db {
	case "sqlite":
		st, err = store.OpenSQLite(ctx, filepath.Join(b.TempDir(), "cp.db"))
	case "postgres":
		dsn := storetest.PostgresSchema(&testing.T{}, testenv.RequireEnv(b, "SYSBOX_TEST_PG_DSN"))
		st, err = store.OpenPostgres(ctx, dsn)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	srv, err := server.New(st, key, slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: slog.LevelError})))
	if err != nil {
		b.Fatal(err)
	}
	srv.LeaseTTL = time.Hour
	ts := httptest.NewServer(srv.Handler())
	b.Cleanup(ts.Close)
	p, err := st.CreateProject(ctx, "bench")
	if err != nil {
		b.Fatal(err)
	}
	ws, err := st.CreateWorkspace(ctx, p.ID, "lab")
	if err != nil {
		b.Fatal(err)
	}
	rev, _, err := st.PutRevision(ctx, p.ID, []byte(`{"files":{}}`))
	if err != nil {
		b.Fatal(err)
	}
	pl, err := st.PutPlan(ctx, p.ID, ws.ID, rev.Digest, []byte(`{"plan":"bench"}`), []string{"driver:netns"})
	if err != nil {
		b.Fatal(err)
	}
	r := &rig{st: st, project: p.ID, plan: pl.ID}
	for i := range agents {
		tok, _, err := st.CreateToken(ctx, store.TokenJoin, p.ID, fmt.Sprint("agent-", i))
		if err != nil {
			b.Fatal(err)
		}
		_, k, _ := ed25519.GenerateKey(rand.Reader)
		a, err := client.Join(ctx, ts.URL, nil, tok, fmt.Sprint("agent-", i), k, []string{"driver:netns"})
		if err != nil {
			b.Fatal(err)
		}
		r.agents = append(r.agents, a)
	}
	hctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, a := range r.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(heartbeat)
			defer t.Stop()
			for {
				select {
				case <-hctx.Done():
					return
				case <-t.C:
					if a.Heartbeat(hctx, []string{"driver:netns"}) == nil {
						r.beats.Add(1)
					}
				}
			}
		}()
	}
	b.Cleanup(func() { stop(); wg.Wait() })
	return r
}

// BenchmarkClaim: b.N queued runs, claimed and completed by 50 agents at once (each claim a
// signed request whose answer is signed), while every agent heartbeats each second.
func BenchmarkClaim(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run(db, func(b *testing.B) {
			r := newRig(b, db, time.Second)
			for range b.N {
				if _, err := r.st.CreateRun(ctx, r.project, r.plan, "apply", false); err != nil {
					b.Fatal(err)
				}
			}
			var claimed atomic.Int64
			beats := r.beats.Load()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for _, a := range r.agents {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						l, err := a.Claim(ctx)
						if err != nil {
							b.Error(err)
							return
						}
						if l == nil {
							return
						}
						if err := a.Complete(ctx, l, "succeeded", "bench", 0); err != nil {
							b.Error(err)
							return
						}
						claimed.Add(1)
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			if claimed.Load() != int64(b.N) {
				b.Fatalf("claimed %d runs, want %d", claimed.Load(), b.N)
			}
			b.ReportMetric(float64(b.N)/el.Seconds(), "runs/s")
			b.ReportMetric(float64(r.beats.Load()-beats)/el.Seconds(), "heartbeats/s")
		})
	}
}

// BenchmarkEvents: each of 50 agents holds a run and appends batches of 10 progress events
// (the agent sends a batch per write of the CLI's output), b.N events in all.
func BenchmarkEvents(b *testing.B) {
	for _, db := range []string{"sqlite", "postgres"} {
		b.Run(db, func(b *testing.B) {
			r := newRig(b, db, time.Second)
			leases := make([]*client.Lease, len(r.agents))
			for i, a := range r.agents {
				if _, err := r.st.CreateRun(ctx, r.project, r.plan, "apply", false); err != nil {
					b.Fatal(err)
				}
				l, err := a.Claim(ctx)
				if err != nil || l == nil {
					b.Fatalf("claim: %v %v", l, err)
				}
				leases[i] = l
			}
			const batch = 10
			evs := make([]client.Event, batch)
			for i := range evs {
				evs[i] = client.Event{Kind: "progress", Data: fmt.Sprintf("sysbox_node.web[%d]: Creation complete after 12ms", i)}
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			beats := r.beats.Load()
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for i, a := range r.agents {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-batch) > -batch {
						if _, err := a.Events(ctx, leases[i], evs...); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			el := time.Since(start)
			b.StopTimer()
			sent := (int64(b.N) + batch - 1) / batch * batch
			b.ReportMetric(float64(sent)/el.Seconds(), "events/s")
			b.ReportMetric(float64(r.beats.Load()-beats)/el.Seconds(), "heartbeats/s")
		})
	}
}
