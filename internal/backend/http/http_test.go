package http

import (
	"context"
	"errors"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/backendtest"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/states"
)

func setup(t *testing.T) (*Backend, *backendtest.DocServer) {
	srv := backendtest.NewDocServer(t)
	b, err := New(srv.URL+"/state/lab", nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, srv
}

func TestDeclaresNoLockingOrCAS(t *testing.T) {
	b, _ := setup(t)
	c := b.Describe().Capabilities
	if c.Has(backend.Locking) || c.Has(backend.CAS) {
		t.Fatalf("got capabilities %s, want neither locking nor compare-and-swap", c)
	}
}

func TestManagerRefusesMutationUnlessAllowed(t *testing.T) {
	ctx := context.Background()
	b, srv := setup(t)
	_, err := backend.NewManager(b, backend.Options{}).Mutate(ctx, "apply", false, func(*states.State) error {
		t.Fatal("mutation ran on an unsafe backend")
		return nil
	})
	var ue *backend.UnsafeBackendError
	if !errors.As(err, &ue) || !errors.Is(err, backend.ErrUnsafe) || ue.Missing != backend.Locking|backend.CAS ||
		!strings.Contains(err.Error(), "locking, compare-and-swap") || !strings.Contains(err.Error(), "--allow-unsafe-state") {
		t.Fatalf("got %v, want *UnsafeBackendError naming locking and compare-and-swap and --allow-unsafe-state", err)
	}
	if n := srv.Puts(); n != 0 {
		t.Fatalf("got %d PUTs, want none", n)
	}
	m := backend.NewManager(b, backend.Options{AllowUnsafe: true})
	st, err := m.Mutate(ctx, "apply", false, func(st *states.State) error {
		st.Set(backendtest.Resource(st.Lineage, "sysbox_node.web"))
		return nil
	})
	if err != nil {
		t.Fatalf("with allow-unsafe: %v", err)
	}
	got, err := b.Read(ctx)
	if err != nil || got.Serial != 1 || got.Lineage != st.Lineage || len(got.Resources) != 1 {
		t.Fatalf("got %+v %v, want serial 1 with one resource", got, err)
	}
}

func TestReadChecksState(t *testing.T) {
	ctx := context.Background()
	b, srv := setup(t)
	if st, err := b.Read(ctx); st != nil || err != nil {
		t.Fatalf("empty: got %v %v, want nil nil", st, err)
	}
	srv.SetDoc([]byte(`{"format_version": 1, "lineage": "x", "ser`))
	if _, err := b.Read(ctx); !errors.Is(err, durable.ErrCorrupt) {
		t.Fatalf("torn document: got %v, want ErrCorrupt", err)
	}
	if err := b.Delete(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, 0); !errors.Is(err, backend.ErrNoState) {
		t.Fatalf("second delete: got %v, want ErrNoState", err)
	}
}

func TestCredentialsNeverShown(t *testing.T) {
	b, err := New("http://user:hunter2@127.0.0.1:1/state", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Read(context.Background())
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(b.Describe().Location, "hunter2") {
		t.Fatalf("got %v / %q, want an error and a location without the password", err, b.Describe().Location)
	}
	if _, err := New("ftp://x", nil); err == nil {
		t.Fatalf("ftp URL: got nil error")
	}
}
