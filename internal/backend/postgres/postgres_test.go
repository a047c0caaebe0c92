package postgres

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/backendtest"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/internal/testenv"
)

func open(settings map[string]string) (backend.Backend, error) {
	return Open(context.Background(), settings)
}

func TestMain(m *testing.M) { backendtest.Main(m, open) }

var seq atomic.Int64

// dsn returns SYSBOX_TEST_PG_DSN (a real PostgreSQL; scripts/test-all starts one).
func dsn(t *testing.T) string {
	return testenv.RequireEnv(t, "SYSBOX_TEST_PG_DSN")
}

// stateName is unique per test and run, so tests share one database without seeing each other.
func stateName(t *testing.T) string {
	return fmt.Sprintf("test-%d-%d-%d-%s", os.Getpid(), time.Now().UnixNano(), seq.Add(1), strings.ReplaceAll(t.Name(), "/", "-"))
}

func cleanup(t *testing.T, dsn, name string) {
	t.Cleanup(func() {
		b, err := New(context.Background(), dsn, name)
		if err != nil {
			t.Logf("cleanup %s: %v", name, err)
			return
		}
		defer b.Close()
		for _, table := range []string{"sysbox_states", "sysbox_state_snapshots", "sysbox_state_locks"} {
			b.DB().Exec(`DELETE FROM `+table+` WHERE name = $1`, name)
		}
	})
}

func TestConformance(t *testing.T) {
	d := dsn(t)
	backendtest.Run(t, backendtest.Harness{
		Settings: func(t *testing.T) map[string]string {
			name := stateName(t)
			cleanup(t, d, name)
			return map[string]string{"dsn": d, "name": name}
		},
		Open: open,
		WriteRaw: func(t *testing.T, settings map[string]string, data []byte) {
			b, err := Open(context.Background(), settings)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if _, err := b.DB().Exec(`UPDATE sysbox_states SET data = $1 WHERE name = $2`, data, settings["name"]); err != nil {
				t.Fatal(err)
			}
			// A row written by any sysbox has columns matching its document's header.
			if h, err := states.ReadHeader(bytes.NewReader(data)); err == nil {
				if _, err := b.DB().Exec(`UPDATE sysbox_states SET lineage = $1, serial = $2 WHERE name = $3`, h.Lineage, int64(h.Serial), settings["name"]); err != nil {
					t.Fatal(err)
				}
			}
		},
	})
}

func TestLocationHasNoPassword(t *testing.T) {
	d := dsn(t)
	name := stateName(t)
	cleanup(t, d, name)
	b, err := New(context.Background(), d, name)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	loc := b.Describe().Location
	if !strings.HasPrefix(loc, "postgres://") || !strings.HasSuffix(loc, "#"+name) {
		t.Fatalf("got location %q, want postgres://user@host:port/db#%s", loc, name)
	}
	_, err = New(context.Background(), "postgres://u:hunter2@127.0.0.1:1/x?sslmode=disable&connect_timeout=2", "n")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("got %v, want a connection error without the password", err)
	}
}
