package testenv

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/procfs"
)

// MountTmpfs mounts a tmpfs of sizeKiB at dir (an existing, empty directory) for a fault test
// and unmounts it, with anything stacked on it, in t.Cleanup, also when the test fails.
func MountTmpfs(t testing.TB, dir string, sizeKiB int) {
	t.Helper()
	RequireRoot(t)
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dk,mode=0700", sizeKiB)); err != nil {
		t.Fatalf("mount tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		for i := 0; i < 4; i++ {
			if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
				if !errors.Is(err, unix.EINVAL) { // EINVAL: nothing mounted there any more
					t.Errorf("unmount %s: %v", dir, err)
				}
				return
			}
		}
	})
}

// ReadOnly makes the file system mounted at dir read-only while a process may hold files open
// for writing on it. `mount -o remount,ro` is tried first; the kernel refuses it (EBUSY) while
// any file on it is open for writing (a tool's lock file and journal always are during a run),
// and then a read-only bind mount is stacked on dir instead: every open, create, rename, unlink
// and mkdir through a path fails with EROFS, while writes through descriptors opened before
// still reach the file system below. how says which; writable undoes it.
func ReadOnly(t testing.TB, dir string) (how string, writable func()) {
	t.Helper()
	err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, "")
	if err == nil {
		return "remount,ro", func() {
			if err := unix.Mount("", dir, "", unix.MS_REMOUNT, ""); err != nil {
				t.Fatalf("remount %s rw: %v", dir, err)
			}
		}
	}
	if !errors.Is(err, unix.EBUSY) {
		t.Fatalf("remount %s ro: %v", dir, err)
	}
	if err := unix.Mount(dir, dir, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind %s: %v", dir, err)
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount bind %s ro: %v", dir, err)
	}
	return "read-only bind mount (remount,ro: EBUSY, files open for writing)", func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Fatalf("unmount the read-only bind on %s: %v", dir, err)
		}
	}
}

// WaitStopped waits until process pid is stopped (a test build's SIGSTOP failpoint) and
// reports true, or reports false once exited is closed.
func WaitStopped(t testing.TB, pid int, exited <-chan struct{}) bool {
	t.Helper()
	for {
		st, err := procfs.ReadStat(pid)
		if err != nil {
			// Reaped by the caller's Wait an instant before it closes exited: an exit, not an
			// error.
			select {
			case <-exited:
				return false
			case <-time.After(30 * time.Second):
				t.Fatalf("process %d: %v", pid, err)
			}
		}
		if st.State == 'T' {
			return true
		}
		select {
		case <-exited:
			return false
		case <-time.After(5 * time.Millisecond):
		}
	}
}
