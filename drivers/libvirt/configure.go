package libvirt

import (
	"fmt"
	"path/filepath"

	"zyvor.dev/sysbox/internal/driver"
)

// SettingSocket is the driver block setting for libvirtd's socket; it wins over EnvSocket.
const SettingSocket = "socket"

// Configure applies the substrate driver block: socket, an absolute path. It drops any
// connection made to the previous socket.
func (d *Driver) Configure(settings map[string]string) error {
	s, ok, err := driver.OneSetting(Name, settings, SettingSocket)
	if err != nil || !ok {
		return err
	}
	if !filepath.IsAbs(s) {
		return &driver.SettingError{Driver: Name, Key: SettingSocket, Err: fmt.Errorf("%q is not an absolute path", s)}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.lv != nil {
		d.lv.Disconnect() // a connection to the old socket; its error changes nothing here
	}
	d.c, d.lv = nil, nil
	d.socket = filepath.Clean(s)
	return nil
}

// Socket is the libvirtd socket the driver dials.
func (d *Driver) Socket() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.socket
}

var _ driver.Configurable = (*Driver)(nil)
