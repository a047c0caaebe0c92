package docker

import (
	"errors"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
)

func TestConfigure(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///env/docker.sock")
	d, err := New(Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Configure(nil); err != nil || d.Host() != "unix:///env/docker.sock" {
		t.Fatalf("no setting: err %v, host %q, want DOCKER_HOST's", err, d.Host())
	}
	if err := d.Configure(map[string]string{"host": "unix:///block/docker.sock"}); err != nil || d.Host() != "unix:///block/docker.sock" {
		t.Fatalf("host setting: err %v, host %q, want it over DOCKER_HOST", err, d.Host())
	}
	for _, tc := range []struct {
		settings map[string]string
		want     string
	}{
		{map[string]string{"socket": "/x"}, `substrate driver "docker": unknown setting "socket" (known: host)`},
		{map[string]string{"host": "bogus://x"}, `setting "host": "bogus://x": want unix://PATH or tcp://HOST:PORT`},
		{map[string]string{"host": "/var/run/docker.sock"}, `setting "host"`},
	} {
		err := d.Configure(tc.settings)
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.settings, err, tc.want)
		}
		if d.Host() != "unix:///block/docker.sock" {
			t.Errorf("%v: a rejected setting changed the host to %q", tc.settings, d.Host())
		}
	}
}
