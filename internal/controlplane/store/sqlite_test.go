package store_test

import (
	"context"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/store/storetest"
)

func TestConformanceSQLite(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() (*store.Store, error) {
			path := filepath.Join(t.TempDir(), "cp.db")
			return func() (*store.Store, error) { return store.OpenSQLite(context.Background(), path) }
		},
	})
}
