package firecracker

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
)

// Driver block settings.
const (
	// SettingBinary is the firecracker executable; it wins over the PATH lookup of "firecracker".
	SettingBinary = "binary"
	// SettingJailer is the jailer executable: with it, every node's VMM is started under the
	// jailer (chroot, uid/gid), which then needs SettingUID and SettingGID.
	SettingJailer = "jailer"
	// SettingUID and SettingGID are the ids the jailer drops the VMM to.
	SettingUID = "uid"
	SettingGID = "gid"
	// SettingChrootBase is the jailer's --chroot-base-dir (default DefaultChrootBase).
	SettingChrootBase = "chroot_base"
)

// Configure applies the substrate driver block: binary, an absolute path or a bare name on
// PATH, which must name an executable file now; jailer (the same), with uid and gid (decimal
// ids, required with it) and chroot_base (an absolute directory path). uid, gid and
// chroot_base without jailer are refused, so a block that means to jail never runs unjailed.
func (d *Driver) Configure(settings map[string]string) error {
	if err := driver.CheckSettingKeys(Name, settings, SettingBinary, SettingJailer, SettingUID, SettingGID, SettingChrootBase); err != nil {
		return err
	}
	bin := d.binary
	if b, ok := settings[SettingBinary]; ok {
		p, err := executable(SettingBinary, b)
		if err != nil {
			return err
		}
		bin = p
	}
	jail, err := jailSettings(settings)
	if err != nil {
		return err
	}
	// before any other call (Configurable), so spawn reads them unlocked
	d.binary, d.jail = bin, jail
	return nil
}

func bad(key string, err error) error { return &driver.SettingError{Driver: Name, Key: key, Err: err} }

// executable resolves setting key's value b: an absolute path or a bare name on PATH.
func executable(key, b string) (string, error) {
	if b == "" || (!filepath.IsAbs(b) && strings.ContainsRune(b, '/')) {
		// a relative path would depend on the directory sysbox runs in
		return "", bad(key, fmt.Errorf("%q: want an absolute path or a name looked up on PATH", b))
	}
	p, err := exec.LookPath(b)
	if err != nil {
		return "", bad(key, err)
	}
	return p, nil
}

func jailSettings(settings map[string]string) (*jailConfig, error) {
	j, ok := settings[SettingJailer]
	if !ok {
		for _, k := range []string{SettingUID, SettingGID, SettingChrootBase} {
			if _, set := settings[k]; set {
				return nil, bad(k, fmt.Errorf("only meaningful with %q (the VMM runs unjailed without it)", SettingJailer))
			}
		}
		return nil, nil
	}
	p, err := executable(SettingJailer, j)
	if err != nil {
		return nil, err
	}
	c := &jailConfig{Jailer: p, Base: DefaultChrootBase}
	for _, id := range []struct {
		key string
		to  *int
	}{{SettingUID, &c.UID}, {SettingGID, &c.GID}} {
		v, set := settings[id.key]
		if !set {
			return nil, bad(id.key, fmt.Errorf("required with %q: the id the jailer drops the VMM to", SettingJailer))
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil || n == math.MaxUint32 {
			return nil, bad(id.key, fmt.Errorf("%q: want a decimal id below %d", v, uint64(math.MaxUint32)))
		}
		*id.to = int(n)
	}
	if b, set := settings[SettingChrootBase]; set {
		if !filepath.IsAbs(b) || filepath.Clean(b) == "/" {
			return nil, bad(SettingChrootBase, fmt.Errorf("%q: want an absolute directory path other than /", b))
		}
		c.Base = filepath.Clean(b)
	}
	// The kernel names a chrooted VMM's root (/proc/PID/root) without symlinks, and serves
	// compares it with a path under the base: a base reached through a symlink would never match.
	base, err := resolveDir(c.Base)
	if err != nil {
		return nil, bad(SettingChrootBase, fmt.Errorf("%q: %w", c.Base, err))
	}
	if base == "/" {
		return nil, bad(SettingChrootBase, fmt.Errorf("%q resolves to /: want a directory other than /", c.Base))
	}
	c.Base = base
	return c, nil
}

// resolveDir resolves the symlinks of p (absolute, clean) as far as it exists; a missing tail
// (the jailer creates it) is kept as written. A dangling symlink on the way is an error.
func resolveDir(p string) (string, error) {
	rest := ""
	for dir := p; ; dir = filepath.Dir(dir) {
		r, err := filepath.EvalSymlinks(dir)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !errors.Is(err, fs.ErrNotExist) || dir == "/" {
			return "", err
		}
		if _, lerr := os.Lstat(dir); lerr == nil {
			return "", fmt.Errorf("%s is a symlink to nothing: %w", dir, err)
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// Binary is the firecracker executable the driver starts (a path, or a name on PATH).
func (d *Driver) Binary() string { return d.binary }

// Jailer is the jailer executable, uid, gid and chroot base the driver starts VMMs under;
// jailer is "" when VMMs run unjailed.
func (d *Driver) Jailer() (jailer string, uid, gid int, chrootBase string) {
	if d.jail == nil {
		return "", 0, 0, ""
	}
	return d.jail.Jailer, d.jail.UID, d.jail.GID, d.jail.Base
}

var _ driver.Configurable = (*Driver)(nil)
