package libvirt

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
)

func TestConfigure(t *testing.T) {
	env := filepath.Join(t.TempDir(), "env.sock")
	t.Setenv(EnvSocket, env)
	d, err := New(Options{DomainType: TypeQEMU})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Configure(map[string]string{}); err != nil || d.Socket() != env {
		t.Fatalf("no setting: err %v, socket %q, want the environment's %q", err, d.Socket(), env)
	}
	block := filepath.Join(t.TempDir(), "block.sock") // nothing listens there
	if err := d.Configure(map[string]string{"socket": block}); err != nil || d.Socket() != block {
		t.Fatalf("socket setting: err %v, socket %q, want %q over the environment", err, d.Socket(), block)
	}
	// The driver dials the configured socket, and says which one it could not reach.
	_, err = d.conn(context.Background())
	if !errors.Is(err, driver.ErrUnavailable) || !strings.Contains(err.Error(), block) {
		t.Fatalf("dial: got %v, want unavailable naming %s", err, block)
	}
	for _, tc := range []struct {
		settings map[string]string
		want     string
	}{
		{map[string]string{"sockt": "/x"}, `substrate driver "libvirt": unknown setting "sockt" (known: socket)`},
		{map[string]string{"socket": "run/libvirt-sock"}, `substrate driver "libvirt": setting "socket": "run/libvirt-sock" is not an absolute path`},
		{map[string]string{"socket": ""}, `setting "socket": "" is not an absolute path`},
	} {
		err := d.Configure(tc.settings)
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.settings, err, tc.want)
		}
		if d.Socket() != block {
			t.Errorf("%v: a rejected setting changed the socket to %q", tc.settings, d.Socket())
		}
	}
}
