package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A node with a hostname also gets its own UTS namespace, bind-mounted at
// StateDir/NAME.uts; its main process and every exec enter it together with the network
// namespace. Nodes without a hostname share the host's.

func (d *Driver) utsPath(name string) string { return filepath.Join(d.StateDir, name+".uts") }

// createUTS makes a UTS namespace with hostname and bind-mounts it at path.
func createUTS(path, hostname string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o444)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/uts", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("unshare uts: %w", err)
			return
		}
		err = unix.Sethostname([]byte(hostname))
		if err == nil {
			err = unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/uts", unix.Gettid()), path, "none", unix.MS_BIND, "")
		}
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWUTS); serr != nil {
			errc <- fmt.Errorf("return to host uts namespace: %w", serr) // thread stays locked and dies
			return
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	if err := <-errc; err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
		return fmt.Errorf("uts namespace for hostname %q: %w", hostname, err)
	}
	return nil
}

func removeUTS(path string) {
	_ = unix.Unmount(path, unix.MNT_DETACH)
	_ = os.Remove(path)
}

// enter runs fn on a locked OS thread inside the node's network namespace and, if it has one,
// its UTS namespace and its hosts file (see hosts.go); processes fn forks inherit them. The thread is discarded if it cannot
// return to the host namespaces.
func (d *Driver) enter(name string, fn func() error) error {
	netNs, err := d.ns(name).Open()
	if err != nil {
		return err
	}
	defer netNs.Close()
	var uts *os.File
	if isNsfs(d.utsPath(name)) {
		if uts, err = os.Open(d.utsPath(name)); err != nil {
			return err
		}
		defer uts.Close()
	}
	hosts := d.hostsPath(name)
	_, herr := os.Stat(hosts)
	withHosts := herr == nil
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		origNet, err := vnetns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer origNet.Close()
		origUTS, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/uts", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer origUTS.Close()
		if err := vnetns.Set(netNs); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter netns %s: %w", name, err)
			return
		}
		var ferr error
		if uts != nil {
			if err := unix.Setns(int(uts.Fd()), unix.CLONE_NEWUTS); err != nil {
				ferr = fmt.Errorf("enter uts namespace of %s: %w", name, err)
			}
		}
		if ferr == nil && withHosts {
			if ferr = mountHosts(hosts, d.NetnsDir); ferr == nil {
				ferr = fn()
			}
			// The thread now has its own mount namespace: leave it locked so that it exits
			// with this goroutine instead of returning to the pool.
			errc <- ferr
			return
		}
		if ferr == nil {
			ferr = fn()
		}
		if err := vnetns.Set(origNet); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave netns: %w", err))
			return
		}
		if err := unix.Setns(int(origUTS.Fd()), unix.CLONE_NEWUTS); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("leave uts namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func isNsfs(path string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(path, &fs) == nil && fs.Type == unix.NSFS_MAGIC
}
