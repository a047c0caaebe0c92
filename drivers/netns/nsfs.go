package netns

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func (d *Driver) nsPath(name string) string { return filepath.Join(d.NetnsDir, name) }

func (d *Driver) ns(name string) linuxnet.Netns { return linuxnet.Netns{Path: d.nsPath(name)} }

var sharedOnce sync.Map // dir → error

// ensureNetnsDir makes dir a shared mount point, as `ip netns add` does, so that namespace
// bind mounts made here are visible to other mount namespaces.
func ensureNetnsDir(dir string) error {
	v, _ := sharedOnce.LoadOrStore(dir, new(sync.Once))
	var err error
	v.(*sync.Once).Do(func() {
		if err = os.MkdirAll(dir, 0o755); err != nil {
			return
		}
		if e := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); e == nil {
			return
		} else if !errors.Is(e, unix.EINVAL) {
			err = fmt.Errorf("make %s shared: %w", dir, e)
			return
		}
		if e := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); e != nil {
			err = fmt.Errorf("bind %s: %w", dir, e)
			return
		}
		if e := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, ""); e != nil {
			err = fmt.Errorf("make %s shared: %w", dir, e)
		}
	})
	if err != nil {
		sharedOnce.Delete(dir)
	}
	return err
}

// createNamedNetns makes a new network namespace, runs init inside it (on the thread that made
// it: no switch into it later) and bind-mounts it at path. Nothing is mounted if init fails.
func createNamedNetns(path string, init func() error) error {
	if err := ensureNetnsDir(filepath.Dir(path)); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	f.Close()
	err = onThread(func() (bool, error) {
		orig, err := vnetns.Get()
		if err != nil {
			return true, fmt.Errorf("current netns: %w", err)
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return true, fmt.Errorf("unshare: %w", err)
		}
		var ferr error
		if init != nil {
			ferr = init()
		}
		if ferr == nil {
			src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
			if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
				ferr = fmt.Errorf("bind mount namespace at %s: %w", path, err)
			}
		}
		if err := vnetns.Set(orig); err != nil {
			return false, errors.Join(ferr, fmt.Errorf("return to host netns: %w", err))
		}
		return true, ferr
	})
	if err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
		return err
	}
	return nil
}

// removeNamedNetns unmounts and removes the bind mount; the kernel frees the namespace once no
// process or link holds it.
func removeNamedNetns(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// nsInode is the nsfs inode behind path (a bind mount or /proc/PID/ns/net).
func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// fdInode is nsInode of an open descriptor.
func fdInode(fd int) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// isNetnsMount reports whether path is a mounted network namespace (not just a leftover file).
func isNetnsMount(path string) bool {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return false
	}
	return fs.Type == unix.NSFS_MAGIC
}

// errNsUnreadable marks a namespace that could not be entered or read: the marker is unknown,
// not absent (a namespace without a marker gives substrate.ErrNoMarker or a parse error).
var errNsUnreadable = errors.New("cannot read the namespace's marker")

// nsMarker reads the owner marker from the namespace's loopback alias.
func nsMarker(ns linuxnet.Netns) (substrate.Owner, error) {
	nh, err := ns.Netlink()
	if err != nil {
		return substrate.Owner{}, fmt.Errorf("%w: %w", errNsUnreadable, err)
	}
	defer nh.Close()
	return markerVia(nh, ns)
}

// markerVia is nsMarker through an open handle on ns.
func markerVia(nh *netlink.Handle, ns linuxnet.Netns) (substrate.Owner, error) {
	lo, err := nh.LinkByName("lo")
	if err != nil {
		return substrate.Owner{}, fmt.Errorf("%w: netns %s: lo: %w", errNsUnreadable, ns, err)
	}
	return substrate.ParseMarker(lo.Attrs().Alias)
}

// cachedMarker is nsMarker through the connection cache (conns.go): ns has nsfs inode ino.
func (d *Driver) cachedMarker(ns linuxnet.Netns, ino uint64) (substrate.Owner, error) {
	conn, err := d.conns.acquire(filepath.Base(ns.Path), ns.Path, ino)
	if err != nil {
		return substrate.Owner{}, fmt.Errorf("%w: %w", errNsUnreadable, err)
	}
	defer d.conns.release(conn)
	return markerVia(conn.NH, ns)
}

// netnsMount is isNetnsMount with its error: whether path is a mounted network namespace.
func netnsMount(path string) (bool, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return fs.Type == unix.NSFS_MAGIC, nil
}

// markThisNs, on a thread inside a fresh namespace, writes owner's marker into the loopback
// alias, brings lo up and turns forwarding off: a new namespace copies ip_forward from the host
// (on wherever dockerd runs); a node forwards only when a sysbox_router says so. It returns the
// namespace's descriptor and the netlink socket it used, made inside it, for the caller to keep
// (conns.go) or close.
func markThisNs(owner substrate.Owner) (_ linuxnet.NodeConn, err error) {
	nh, err := netlink.NewHandle(unix.NETLINK_ROUTE) // a socket in the thread's namespace
	if err != nil {
		return linuxnet.NodeConn{}, fmt.Errorf("netlink: %w", err)
	}
	conn := linuxnet.NodeConn{NH: nh, Fd: vnetns.None()}
	defer func() {
		if err != nil {
			conn.Close()
		}
	}()
	lo := &netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: 1, Name: "lo"}} // loopback is ifindex 1 in every namespace
	if err := nh.LinkSetAlias(lo, owner.Marker()); err != nil {
		return linuxnet.NodeConn{}, fmt.Errorf("lo alias: %w", err)
	}
	if err := nh.LinkSetUp(lo); err != nil {
		return linuxnet.NodeConn{}, fmt.Errorf("lo up: %w", err)
	}
	// /proc/sys/net resolves to the namespace of the thread that opens it.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("0\n"), 0o644); err != nil {
		return linuxnet.NodeConn{}, fmt.Errorf("sysctl net.ipv4.ip_forward=0: %w", err)
	}
	if conn.Fd, err = vnetns.Get(); err != nil {
		return linuxnet.NodeConn{}, fmt.Errorf("open the new namespace: %w", err)
	}
	return conn, nil
}

// checkNsOwned compares the namespace's marker with owner exactly.
func checkNsOwned(ns linuxnet.Netns, owner substrate.Owner) error {
	if !owner.Complete() {
		return fmt.Errorf("netns %s: incomplete ownership evidence %+v: %w", ns, owner, driver.ErrNotOwned)
	}
	nh, err := ns.Netlink()
	if err != nil {
		return fmt.Errorf("netns %s: no sysbox ownership marker: %v: %w", ns, fmt.Errorf("%w: %w", errNsUnreadable, err), driver.ErrNotOwned)
	}
	defer nh.Close()
	return checkOwnedVia(nh, ns, owner)
}

// checkOwnedVia is checkNsOwned through an open handle on ns.
func checkOwnedVia(nh *netlink.Handle, ns linuxnet.Netns, owner substrate.Owner) error {
	if !owner.Complete() {
		return fmt.Errorf("netns %s: incomplete ownership evidence %+v: %w", ns, owner, driver.ErrNotOwned)
	}
	found, err := markerVia(nh, ns)
	if err != nil {
		return fmt.Errorf("netns %s: no sysbox ownership marker: %v: %w", ns, err, driver.ErrNotOwned)
	}
	if !found.Equal(owner) {
		return fmt.Errorf("netns %s: owned by %s %s generation %d (topology %s), not %s generation %d: %w",
			ns, found.Type, found.Address, found.Generation, found.Topology, owner.Address, owner.Generation, driver.ErrNotOwned)
	}
	return nil
}
