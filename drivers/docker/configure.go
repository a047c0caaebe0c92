package docker

import (
	"fmt"

	"github.com/docker/docker/client"

	"zyvor.dev/sysbox/internal/driver"
)

// SettingHost is the driver block setting for the daemon address (e.g.
// "unix:///var/run/docker.sock"); it wins over DOCKER_HOST.
const SettingHost = "host"

// Configure applies the substrate driver block: host, a unix:// or tcp:// daemon address. It
// replaces the client; nothing has used the old one yet (Configurable).
func (d *Driver) Configure(settings map[string]string) error {
	h, ok, err := driver.OneSetting(Name, settings, SettingHost)
	if err != nil || !ok {
		return err
	}
	bad := func(err error) error { return &driver.SettingError{Driver: Name, Key: SettingHost, Err: err} }
	u, err := client.ParseHostURL(h)
	if err != nil {
		return bad(err)
	}
	if u.Scheme != "unix" && u.Scheme != "tcp" {
		return bad(fmt.Errorf("%q: want unix://PATH or tcp://HOST:PORT", h))
	}
	cli, err := newClient(h)
	if err != nil {
		return bad(err)
	}
	d.cli.Close()
	d.cli = cli
	return nil
}

// Host is the daemon address the driver's client talks to.
func (d *Driver) Host() string { return d.cli.DaemonHost() }

var _ driver.Configurable = (*Driver)(nil)
