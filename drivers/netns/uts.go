package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
	err = onThread(func() (bool, error) {
		orig, err := threadNs("uts")
		if err != nil {
			return true, err
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
			return true, fmt.Errorf("unshare uts: %w", err)
		}
		ferr := unix.Sethostname([]byte(hostname))
		if ferr == nil {
			ferr = unix.Mount(fmt.Sprintf("/proc/self/task/%d/ns/uts", unix.Gettid()), path, "none", unix.MS_BIND, "")
		}
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWUTS); err != nil {
			return false, errors.Join(ferr, fmt.Errorf("return to host uts namespace: %w", err))
		}
		return true, ferr
	})
	if err != nil {
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
// its UTS namespace and its hosts file (see hosts.go); processes fn forks inherit them. The
// thread goes back to the scheduler only once it is back in the host's namespaces (onThread).
func (d *Driver) enter(name string, fn func() error) error {
	netNs, err := d.ns(name).Open()
	if err != nil {
		return err
	}
	defer netNs.Close()
	return d.enterFd(name, netNs, fn)
}

// enterFd is enter with the network namespace already open.
func (d *Driver) enterFd(name string, netNs vnetns.NsHandle, fn func() error) error {
	var err error
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
	return onThread(func() (bool, error) {
		origNet, err := vnetns.Get()
		if err != nil {
			return true, err
		}
		defer origNet.Close()
		origUTS, err := threadNs("uts")
		if err != nil {
			return true, err
		}
		defer origUTS.Close()
		if err := vnetns.Set(netNs); err != nil {
			return true, fmt.Errorf("enter netns %s: %w", name, err)
		}
		var ferr error
		if uts != nil {
			if err := unix.Setns(int(uts.Fd()), unix.CLONE_NEWUTS); err != nil {
				ferr = fmt.Errorf("enter uts namespace of %s: %w", name, err)
			}
		}
		if ferr == nil && withHosts {
			// The thread gets a mount namespace of its own, which it cannot leave: it ends
			// with its goroutine.
			if ferr = mountHosts(hosts, d.NetnsDir); ferr == nil {
				ferr = fn()
			}
			return false, ferr
		}
		if ferr == nil {
			ferr = fn()
		}
		if err := vnetns.Set(origNet); err != nil {
			return false, errors.Join(ferr, fmt.Errorf("leave netns: %w", err))
		}
		if err := unix.Setns(int(origUTS.Fd()), unix.CLONE_NEWUTS); err != nil {
			return false, errors.Join(ferr, fmt.Errorf("leave uts namespace: %w", err))
		}
		return true, ferr
	})
}

func isNsfs(path string) bool {
	var fs unix.Statfs_t
	return unix.Statfs(path, &fs) == nil && fs.Type == unix.NSFS_MAGIC
}
