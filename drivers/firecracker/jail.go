package firecracker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
)

// The jailed layout (Firecracker's docs/jailer.md). With a jailer configured, a node's VMM is
// started as
//
//	jailer --id NAME --exec-file FIRECRACKER --uid U --gid G --chroot-base-dir BASE -- --api-sock /api.sock
//
// and the jailer execs FIRECRACKER chrooted into BASE/<exec file name>/NAME/root (the chroot),
// as U:G. Everything the VMM opens must be inside the chroot and named by its path there: the
// API socket, the rootfs copy, the kernel (hard-linked when world-readable, else copied), the
// vsock uds_path and the snapshot files; the driver sends "/rootfs.img", not the host path.
// The node directory (record, log) stays outside the chroot, where the VMM cannot touch it; its
// v.sock is a symlink to the chroot's, so the guest-agent glue dials the same path either way.
// BASE/<exec>/NAME/sysbox-owner carries the node's marker: a jail directory without it, or
// with another owner's, is never removed.

// DefaultChrootBase is the jailer's own default --chroot-base-dir.
const DefaultChrootBase = "/srv/jailer"

const (
	jailOwnerFile = "sysbox-owner"
	jailRootDir   = "root"
	kernelFile    = "vmlinux"
)

// jailConfig is the driver block's jailer settings; nil when the VMM runs unjailed.
type jailConfig struct {
	Jailer string
	UID    int
	GID    int
	Base   string
}

// jailRecord is a jailed node's layout, in its record: a node keeps the layout it was
// created with whatever the driver is configured with later.
type jailRecord struct {
	Jailer string `json:"jailer"`
	Exec   string `json:"exec_file"`
	UID    int    `json:"uid"`
	GID    int    `json:"gid"`
	Base   string `json:"chroot_base"`
}

// dir is BASE/<exec file name>/NAME, the jailer's directory of the node (its chroot's parent).
func (j *jailRecord) dir(name string) string {
	return filepath.Join(j.Base, filepath.Base(j.Exec), name)
}

// root is the node's chroot on the host.
func (j *jailRecord) root(name string) string { return filepath.Join(j.dir(name), jailRootDir) }

// key names the layout for snapshot fitting: a snapshot's files belong to one uid and chroot.
func (j *jailRecord) key() string {
	if j == nil {
		return ""
	}
	return fmt.Sprintf("%d:%d@%s", j.UID, j.GID, filepath.Join(j.Base, filepath.Base(j.Exec)))
}

// argv is the jailer command line that starts the node's VMM (no --daemonize: the jailer
// execs in place, so the started pid is the VMM's).
func (j *jailRecord) argv(name string) []string {
	return []string{j.Jailer, "--id", name, "--exec-file", j.Exec,
		"--uid", strconv.Itoa(j.UID), "--gid", strconv.Itoa(j.GID), "--chroot-base-dir", j.Base,
		"--", "--api-sock", "/" + apiSock}
}

// fileOwner is who must own the files the VMM opens; a zero value changes nothing.
type fileOwner struct {
	set      bool
	uid, gid int
}

func (r nodeRecord) owner() fileOwner {
	if r.Jail == nil {
		return fileOwner{}
	}
	return fileOwner{set: true, uid: r.Jail.UID, gid: r.Jail.GID}
}

func (o fileOwner) chown(p string) error {
	if !o.set {
		return nil
	}
	if err := os.Lchown(p, o.uid, o.gid); err != nil {
		return fmt.Errorf("chown %s to %d:%d: %w", p, o.uid, o.gid, err)
	}
	return nil
}

// filesDir is where the files the VMM opens live on the host: the chroot, or the node directory.
func (d *Driver) filesDir(r nodeRecord) string {
	if r.Jail != nil {
		return r.Jail.root(r.Name)
	}
	return d.nodeDir(r.Name)
}

// vmmPath is host path p as r's VMM names it: relative to its chroot, when jailed.
func (d *Driver) vmmPath(r nodeRecord, p string) string {
	if r.Jail == nil {
		return p
	}
	rel, err := filepath.Rel(r.Jail.root(r.Name), p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return p // outside the chroot: the VMM's open fails and names it
	}
	return "/" + rel
}

// newJail is the layout for a node created now, or nil without a jailer.
func (d *Driver) newJail() (*jailRecord, error) {
	if d.jail == nil {
		return nil, nil
	}
	fc, err := exec.LookPath(d.binary)
	if err != nil {
		return nil, fmt.Errorf("binary %q: %w", d.binary, err)
	}
	jailer, err := exec.LookPath(d.jail.Jailer)
	if err != nil {
		return nil, fmt.Errorf("jailer %q: %w", d.jail.Jailer, err)
	}
	if !filepath.IsAbs(fc) {
		// the jailer resolves --exec-file itself; a relative path would depend on its directory
		if fc, err = filepath.Abs(fc); err != nil {
			return nil, err
		}
	}
	return &jailRecord{Jailer: jailer, Exec: fc, UID: d.jail.UID, GID: d.jail.GID, Base: d.jail.Base}, nil
}

// prepareJail makes r's jail directory (its owner file first, then the chroot, owned by the
// VMM's uid:gid as the jailer leaves it), hard-links or copies the kernel in and links the node
// directory's v.sock to the chroot's. A jail directory of another owner is refused, untouched.
func (d *Driver) prepareJail(r nodeRecord) error {
	j := r.Jail
	dir := j.dir(r.Name)
	if err := checkJailOwner(dir, r.Marker); err != nil && !errors.Is(err, driver.ErrNotFound) {
		return err
	} else if err != nil {
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return fmt.Errorf("jail %s: %w", dir, err)
		}
		if err := createMarkedDir(dir, r.Marker); err != nil {
			return fmt.Errorf("jail %s: %w", dir, err)
		}
	}
	root := j.root(r.Name)
	if err := os.Mkdir(root, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("jail %s: %w", root, err)
	}
	own := r.owner()
	if err := own.chown(root); err != nil {
		return fmt.Errorf("jail: %w", err)
	}
	if err := placeKernel(r.Kernel, filepath.Join(root, kernelFile), own); err != nil {
		return err
	}
	link := filepath.Join(d.nodeDir(r.Name), vsockFile)
	if t, err := os.Readlink(link); err != nil || t != filepath.Join(root, vsockFile) {
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(root, vsockFile), link); err != nil {
			return fmt.Errorf("jail: vsock link: %w", err)
		}
	}
	return nil
}

// createMarkedDir makes dir holding the owner file, built under a temporary name and renamed
// into place, so dir never exists without its marker.
func createMarkedDir(dir, marker string) error {
	// Temporary directories of this jail left by a killed run hold nothing but the owner file.
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".tmp-"+filepath.Base(dir)+"-*"))
	for _, p := range stale {
		_ = os.RemoveAll(p)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".tmp-"+filepath.Base(dir)+"-")
	if err != nil {
		return err
	}
	err = os.Chmod(tmp, 0o755)
	if err == nil {
		err = durable.WriteFile(filepath.Join(tmp, jailOwnerFile), []byte(marker+"\n"), 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, dir)
	}
	if err == nil {
		err = syncDir(filepath.Dir(dir))
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
	}
	return err
}

// checkJailOwner proves dir carries marker: ErrNotFound without dir, ErrNotOwned with another
// owner's marker or none.
func checkJailOwner(dir, marker string) error {
	b, err := os.ReadFile(filepath.Join(dir, jailOwnerFile))
	switch {
	case err == nil && strings.TrimSpace(string(b)) == marker:
		return nil
	case err == nil:
		return fmt.Errorf("jail %s: carries another owner's marker: %w", dir, driver.ErrNotOwned)
	case errors.Is(err, os.ErrNotExist):
		if _, serr := os.Lstat(dir); errors.Is(serr, os.ErrNotExist) {
			return fmt.Errorf("jail %s: %w", dir, driver.ErrNotFound)
		}
		return fmt.Errorf("jail %s: exists without a sysbox owner file: %w", dir, driver.ErrNotOwned)
	default:
		return fmt.Errorf("jail %s: %v: %w", dir, err, driver.ErrUnavailable)
	}
}

// removeJail removes r's jail directory when it carries r's marker; an absent one, or one
// that is not r's (never touched), is left as it is.
func removeJail(r nodeRecord) error {
	if r.Jail == nil {
		return nil
	}
	dir := r.Jail.dir(r.Name)
	err := checkJailOwner(dir, r.Marker)
	switch {
	case errors.Is(err, driver.ErrNotFound), errors.Is(err, driver.ErrNotOwned):
		return nil
	case err != nil:
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("jail %s: %w", dir, err)
	}
	return syncDir(filepath.Dir(dir))
}

// placeKernel puts the kernel at dst inside the chroot: a hard link when the kernel is
// world-readable (the VMM only reads it, and a link must not chown the artifact itself), else
// a copy owned by own.
func placeKernel(src, dst string, own fileOwner) error {
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() {
		if sfi, serr := os.Stat(src); serr == nil && os.SameFile(fi, sfi) {
			return nil
		}
		if err := os.Remove(dst); err != nil {
			return fmt.Errorf("kernel %s: %w", dst, err)
		}
	}
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("kernel %s: %w", src, err)
	}
	if fi.Mode().Perm()&0o004 != 0 {
		if err := os.Link(src, dst); err == nil {
			return nil
		}
	}
	if err := copyRootfs(src, dst, "", own); err != nil {
		return fmt.Errorf("kernel: %w", err)
	}
	return nil
}
