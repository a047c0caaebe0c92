package linuxnet

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Records of kernel objects (namespaces, links, their owners and intents) describe things that
// die with the machine, so they belong on a file system that dies with it too: /run is a tmpfs
// on a systemd host. Some hosts (containers, minimal VMs without systemd — ours among them) keep
// /run on the root disk, where every record costs a device flush on fsync and, on ext4
// without a journal, file creation slows with every recently deleted inode; a 1,000-node netns
// apply there took ~1.4× its time with the records on a tmpfs. EnsureMemoryFS gives such a host
// what systemd would have: a tmpfs at the runtime root, mounted once per boot by the first
// command that needs it.

// EnsureMemoryFS makes root (created if missing) a tmpfs mount, unless it is one already (or a
// ramfs), is a mount point of something else (the administrator's choice), or holds any file
// that is not a directory — records already written there must stay visible, so a host whose
// runtime root has records on disk keeps using the disk until they are gone. It reports whether
// it mounted.
//
// Processes are kept apart by flock on root's directory (the one on disk): the deciding process
// holds it exclusively while it checks and mounts; a process that stays on the disk keeps a
// shared lock for the rest of its life, so that no other process mounts over records it may
// still be writing. A failure leaves root as it was: the records then go to disk, which is
// slower and just as correct.
//
// A process decides once per root, failure included (later calls return false, nil): its own
// shared lock would otherwise keep a second decision waiting, and callers ask before every
// record they create.
func EnsureMemoryFS(root string) (mounted bool, err error) {
	decided.Lock()
	defer decided.Unlock()
	if decided.roots[root] {
		return false, nil
	}
	decided.roots[root] = true
	return ensureMemoryFS(root)
}

var decided = struct {
	sync.Mutex
	roots map[string]bool
}{roots: map[string]bool{}}

func ensureMemoryFS(root string) (mounted bool, err error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return false, fmt.Errorf("runtime root %s: %w", root, err)
	}
	if mem, err := onMemoryFS(root); err != nil || mem {
		return false, err
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, fmt.Errorf("runtime root %s: %w", root, err)
	}
	keep := false
	defer func() {
		if !keep {
			unix.Close(fd)
		}
	}()
	// Exclusive only when nobody is using the disk copy: a shared holder may be mid-write.
	// Deciders hold it briefly, so wait a little for them before giving up on the mount.
	exclusive := false
	for range 50 {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			exclusive = true
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return false, fmt.Errorf("lock runtime root %s: %w", root, err)
		}
		if mem, err := onMemoryFS(root); err != nil || mem {
			return false, err
		}
		time.Sleep(20 * time.Millisecond)
	}
	if exclusive {
		// Another process may have mounted it before this one got the lock.
		if mem, err := onMemoryFS(root); err != nil || mem {
			return false, err
		}
		ok, err := mountable(root)
		if err != nil {
			return false, err
		}
		if ok {
			if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
				return false, fmt.Errorf("mount tmpfs at runtime root %s: %w", root, err)
			}
			return true, nil
		}
	}
	// This process writes to the disk copy: hold a shared lock until it exits (fd stays open).
	if err := unix.Flock(fd, unix.LOCK_SH); err != nil {
		return false, fmt.Errorf("lock runtime root %s: %w", root, err)
	}
	keep = true
	return false, nil
}

// mountable reports whether a tmpfs may go over root: root is not a mount point and holds no
// file but directories.
func mountable(root string) (bool, error) {
	if mp, err := isMountPoint(root); err != nil || mp {
		return false, err
	}
	held, err := holdsFiles(root)
	return held == "", err
}

func onMemoryFS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false, fmt.Errorf("runtime root %s: statfs: %w", path, err)
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC, nil
}

// isMountPoint reports whether path is the root of a mount (statx's mount-root attribute, which
// also sees a bind mount within one file system; the device compared with the parent's where
// the kernel does not report it).
func isMountPoint(path string) (bool, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS, &stx); err != nil {
		return false, fmt.Errorf("runtime root %s: %w", path, err)
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT != 0 {
		return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
	}
	var pst unix.Stat_t
	if err := unix.Lstat(filepath.Join(path, ".."), &pst); err != nil {
		return false, fmt.Errorf("runtime root %s: parent: %w", path, err)
	}
	return unix.Mkdev(stx.Dev_major, stx.Dev_minor) != pst.Dev, nil
}

// holdsFiles returns the path of the first entry below root that is not a directory ("" when
// there is none). Empty directories left by an earlier run hold nothing to lose.
func holdsFiles(root string) (string, error) {
	errFound := errors.New("found")
	var found string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			found = p
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return "", fmt.Errorf("runtime root %s: %w", root, err)
	}
	return found, nil
}

// RuntimeRoot is where the drivers keep their records by default (/run/sysbox/<driver>).
const RuntimeRoot = "/run/sysbox"

// PrepareStateDir puts RuntimeRoot on a memory file system (EnsureMemoryFS) when stateDir lies
// below it, before a driver first writes there; a state directory elsewhere (a test's, an
// administrator's) is left alone. The outcome is logged once per process; a failure only
// means the records stay on disk.
func PrepareStateDir(stateDir string) {
	root := RuntimeRoot
	if !strings.HasPrefix(filepath.Clean(stateDir), root+string(filepath.Separator)) {
		return
	}
	mounted, err := EnsureMemoryFS(root)
	switch {
	case err != nil:
		slog.Warn("runtime records stay on disk", "dir", root, "err", err)
	case mounted:
		slog.Info("runtime directory was on a disk file system; mounted a tmpfs there for records of objects that do not outlive the boot", "dir", root)
	}
}
