package store_test

import (
	"context"
	"testing"

	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/store/storetest"
	"zyvor.dev/sysbox/internal/testenv"
)

func TestConformancePostgres(t *testing.T) {
	dsn := testenv.RequireEnv(t, "SYSBOX_TEST_PG_DSN")
	storetest.Run(t, storetest.Harness{
		Fresh: func(t *testing.T) func() (*store.Store, error) {
			d := storetest.PostgresSchema(t, dsn)
			return func() (*store.Store, error) { return store.OpenPostgres(context.Background(), d) }
		},
	})
}
