package storetest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/backend/postgres"
)

var schemaSeq atomic.Int64

// PostgresSchema creates a schema of its own for t in the database of dsn, dropped when t
// ends, and returns a dsn whose connections use it (search_path), so tests share one server
// without seeing each other's rows.
func PostgresSchema(t *testing.T, dsn string) string {
	t.Helper()
	ctx := context.Background()
	// A plain connection: opening a store would migrate the dsn's own schema.
	admin, _, err := postgres.OpenDB(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("cp_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e9, schemaSeq.Add(1))
	if _, err := admin.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer admin.Close()
		if _, err := admin.ExecContext(ctx, `DROP SCHEMA `+schema+` CASCADE`); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
