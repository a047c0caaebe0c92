package firecracker

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
)

// SettingBinary is the driver block setting for the firecracker executable; it wins over the
// PATH lookup of "firecracker".
const SettingBinary = "binary"

// Configure applies the substrate driver block: binary, an absolute path or a bare name on
// PATH, which must name an executable file now.
func (d *Driver) Configure(settings map[string]string) error {
	b, ok, err := driver.OneSetting(Name, settings, SettingBinary)
	if err != nil || !ok {
		return err
	}
	bad := func(err error) error { return &driver.SettingError{Driver: Name, Key: SettingBinary, Err: err} }
	if b == "" || (!filepath.IsAbs(b) && strings.ContainsRune(b, '/')) {
		// a relative path would depend on the directory sysbox runs in
		return bad(fmt.Errorf("%q: want an absolute path or a name looked up on PATH", b))
	}
	p, err := exec.LookPath(b)
	if err != nil {
		return bad(err)
	}
	d.binary = p // before any other call (Configurable), so spawn reads it unlocked
	return nil
}

// Binary is the firecracker executable the driver starts (a path, or a name on PATH).
func (d *Driver) Binary() string { return d.binary }

var _ driver.Configurable = (*Driver)(nil)
