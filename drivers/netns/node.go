package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/procfs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// basePath is the PATH a node's processes get unless their environment sets one.
const basePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// CreateNode creates the node's namespace (not its process). An existing namespace of that name
// carrying exactly spec.Owner's marker is adopted (a re-run after a crash); anything else there
// is refused with driver.ErrNotOwned and left alone.
func (d *Driver) CreateNode(ctx context.Context, spec substrate.NodeSpec) (substrate.Handle, error) {
	d.ensureRuntime()
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("node %s: incomplete owner %+v", spec.Owner.Address, spec.Owner)
	}
	name := NetnsName(spec.Owner)
	path := d.nsPath(name)
	where := fmt.Sprintf("node %s: netns %s", spec.Owner.Address, name)
	create := true
	var conn linuxnet.NodeConn
	if fi, err := os.Stat(path); err == nil {
		create = false
		pending := d.pendingFor(name, spec.Owner)
		switch {
		case !isNetnsMount(path) && pending && fi.Mode().IsRegular() && fi.Size() == 0:
			// Our own placeholder from a run killed before the bind mount: reuse the name.
			if err := os.Remove(path); err != nil {
				return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
			}
			create = true
		case !isNetnsMount(path):
			return substrate.Handle{}, fmt.Errorf("%s: %s exists but is not a mounted namespace: %w", where, path, driver.ErrNotOwned)
		case pending && unmarked(d.ns(name)):
			// Created by a run killed before it could mark it; the intent proves it is ours.
			if err := d.initNs(name, spec.Owner); err != nil {
				return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
			}
		default:
			if err := checkNsOwned(d.ns(name), spec.Owner); err != nil {
				return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
			}
		}
	}
	if create {
		// What the previous generation left first, if its namespace is gone (leftovers.go).
		if err := d.removePrevious(ctx, spec.Owner); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
		}
		// Intent first: a sidecar with the marker and no inode yet.
		if err := d.writeSidecar(sidecar{Marker: spec.Owner.Marker(), Netns: name, HasCommand: len(spec.Command) > 0}); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
		}
		if err := createNamedNetns(path, func() (err error) { conn, err = markThisNs(spec.Owner); return err }); err != nil {
			conn.Close()
			return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
		}
	}
	// The creation thread's socket and descriptor serve the calls that wire and start the node
	// (conns.go); kept only once the namespace is known mounted at path with their inode.
	keep := false
	defer func() {
		if !keep {
			conn.Close()
		}
	}()
	if spec.Hostname != "" && !isNsfs(d.utsPath(name)) {
		if err := createUTS(d.utsPath(name), spec.Hostname); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
		}
	}
	ino, err := nsInode(path)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	// The sidecar written before creation already holds the marker; its inode is recorded by
	// StartNode (one durable write fewer per node). Rewrite only a missing or foreign one (an
	// adopted namespace's: one this call created has the one written above).
	if create {
		d.fresh.Store(freshKey(name, ino), true)
		keep = d.keepCreated(name, ino, conn)
	} else if old, err := d.readSidecar(name); err != nil || old.Marker != spec.Owner.Marker() || (old.NsInode != 0 && old.NsInode != ino) {
		if err := d.writeSidecar(sidecar{Marker: spec.Owner.Marker(), Netns: name, NsInode: ino, HasCommand: len(spec.Command) > 0}); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
		}
	}
	return substrate.Handle{Driver: Name, ExternalID: name, Private: encode(private{Kind: kindNode, Netns: name, NsInode: ino})}, nil
}

// keepCreated caches conn, the creation thread's descriptor and socket of the namespace just
// mounted at name's path with inode ino, if it is that namespace (conns.go); markThisNs
// brought its loopback up.
func (d *Driver) keepCreated(name string, ino uint64, conn linuxnet.NodeConn) bool {
	if conn.NH == nil || !conn.Fd.IsOpen() {
		return false
	}
	if got, err := fdInode(int(conn.Fd)); err != nil || got != ino {
		return false
	}
	d.conns.put(name, ino, conn)
	d.noteWired(name, ino, "", nil)
	return true
}

// initNs marks a namespace a killed run created but did not mark (markThisNs).
func (d *Driver) initNs(name string, owner substrate.Owner) error {
	h, err := d.ns(name).Open()
	if err != nil {
		return err
	}
	defer h.Close()
	if err := inNetns(h, func() error {
		conn, err := markThisNs(owner)
		conn.Close()
		return err
	}); err != nil {
		return fmt.Errorf("netns %s: %w", d.nsPath(name), err)
	}
	return nil
}

// pendingFor reports whether the sidecar records the creation of name by exactly owner, for the
// namespace now mounted there (or before any namespace was recorded).
func (d *Driver) pendingFor(name string, owner substrate.Owner) bool {
	sc, err := d.readSidecar(name)
	if err != nil || sc.Marker != owner.Marker() {
		return false
	}
	if sc.NsInode == 0 {
		return true
	}
	ino, err := nsInode(d.nsPath(name))
	return err == nil && isNetnsMount(d.nsPath(name)) && ino == sc.NsInode
}

// unmarked reports whether the namespace's loopback carries no alias at all.
func unmarked(ns linuxnet.Netns) bool {
	nh, err := ns.Netlink()
	if err != nil {
		return false
	}
	defer nh.Close()
	return unmarkedVia(nh)
}

// unmarkedVia is unmarked through an open handle on the namespace.
func unmarkedVia(nh *netlink.Handle) bool {
	lo, err := nh.LinkByName("lo")
	return err == nil && lo.Attrs().Alias == ""
}

// NodeNetns implements linuxnet.NamespaceResolver.
func (d *Driver) NodeNetns(ctx context.Context, h substrate.Handle) (linuxnet.Netns, error) {
	ns, _, err := d.nodeNetns(h)
	return ns, err
}

// nodeNetns is NodeNetns with the namespace's nsfs inode.
func (d *Driver) nodeNetns(h substrate.Handle) (linuxnet.Netns, uint64, error) {
	p, err := decode(h.Private, kindNode)
	if err != nil {
		return linuxnet.Netns{}, 0, fmt.Errorf("node %s: %w", h.ExternalID, err)
	}
	path := d.nsPath(p.Netns)
	ino, err := nsInode(path)
	if errors.Is(err, os.ErrNotExist) {
		d.conns.forget(p.Netns)
		return linuxnet.Netns{}, 0, fmt.Errorf("node %s: %w: %w", h.ExternalID, driver.ErrNotFound, err)
	} else if err != nil {
		// Unreadable is not gone: callers that treat NotFound as done (stop, delete policy)
		// must not report success for a namespace they cannot see.
		return linuxnet.Netns{}, 0, fmt.Errorf("node %s: %w: %w", h.ExternalID, driver.ErrUnavailable, err)
	} else if mounted, err := netnsMount(path); err != nil {
		return linuxnet.Netns{}, 0, fmt.Errorf("node %s: %w: %w", h.ExternalID, driver.ErrUnavailable, err)
	} else if !mounted {
		// A file but no namespace (a delete killed between unmount and unlink, or a create
		// killed before the mount): nothing to enter. DeleteNode decides whose file it is.
		d.conns.forget(p.Netns)
		return linuxnet.Netns{}, 0, fmt.Errorf("node %s: %w: no namespace is mounted at %s", h.ExternalID, driver.ErrNotFound, path)
	} else if p.NsInode != 0 && ino != p.NsInode {
		return linuxnet.Netns{}, 0, fmt.Errorf("node %s: namespace was replaced (inode %d, recorded %d): %w", h.ExternalID, ino, p.NsInode, driver.ErrNotOwned)
	}
	return d.ns(p.Netns), ino, nil
}

// nodeConn is nodeNetns with a connection to the namespace (conns.go); the caller releases it.
func (d *Driver) nodeConn(h substrate.Handle) (linuxnet.Netns, uint64, *nsConn, error) {
	ns, ino, err := d.nodeNetns(h)
	if err != nil {
		return ns, 0, nil, err
	}
	c, err := d.conns.acquire(filepath.Base(ns.Path), ns.Path, ino)
	if err != nil {
		return ns, 0, nil, fmt.Errorf("node %s: %w: %w", h.ExternalID, driver.ErrUnavailable, err)
	}
	return ns, ino, c, nil
}

// StartNode starts the main process detached inside the namespace: a new session, stdin from
// /dev/null, stdout and stderr appended to /run/sysbox/netns/NAME.log. Its pid and start time go
// into the sidecar. A node already running its recorded process is left alone.
func (d *Driver) StartNode(ctx context.Context, h substrate.Handle, spec substrate.NodeSpec) error {
	ns, ino, conn, err := d.nodeConn(h)
	if err != nil {
		return err
	}
	defer d.conns.release(conn)
	name := h.ExternalID
	where := fmt.Sprintf("node %s: netns %s", spec.Owner.Address, name)
	d.dropWired(filepath.Base(ns.Path)) // wired and configured by now
	if err := checkOwnedVia(conn.NH, ns, spec.Owner); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	sc, err := d.readSidecar(name)
	if err != nil {
		return fmt.Errorf("%s: sidecar: %w", where, err)
	}
	if len(spec.Command) == 0 {
		return nil
	}
	sc.NsInode = ino
	if processAlive(sc.Pid, sc.StartTime, sc.NsInode) {
		return nil
	}
	// A run killed between starting the process and recording it left it running unrecorded:
	// adopt it (a session leader inside this node's namespace running exactly this argv)
	// rather than start a second one that would find its port taken.
	// Not needed at the first start in a namespace this Driver created: nothing unrecorded
	// runs there (any later start searches again).
	if _, fresh := d.fresh.LoadAndDelete(freshKey(name, sc.NsInode)); fresh {
		// fall through to start the process
	} else if pid, start, ok := orphanMain(sc.NsInode, spec.Command); ok {
		sc.Marker, sc.HasCommand, sc.Pid, sc.StartTime, sc.StartedAt, sc.Stopped = spec.Owner.Marker(), true, pid, start, time.Now().UTC(), false
		if err := d.appendSidecar(sc); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		return nil
	}
	bin, err := exec.LookPath(spec.Command[0])
	if err != nil {
		return fmt.Errorf("%s: command %q: %w", where, spec.Command[0], err)
	}
	logf, err := os.OpenFile(d.logPath(name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%s: log: %w", where, err)
	}
	defer logf.Close()
	cmd := &exec.Cmd{Path: bin, Args: spec.Command, Env: childEnv(spec.Environment), Dir: "/", Stdout: logf, Stderr: logf,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := d.enterFd(name, conn.Fd, cmd.Start); err != nil {
		return fmt.Errorf("%s: start %q: %w", where, spec.Command[0], err)
	}
	go func() { _ = cmd.Wait() }() // reap it while this process lives; init adopts it after
	start, err := procfs.StartTime(cmd.Process.Pid)
	if err != nil {
		return fmt.Errorf("%s: main process %d exited at once (see %s): %w", where, cmd.Process.Pid, d.logPath(name), err)
	}
	sc.Marker, sc.HasCommand, sc.Pid, sc.StartTime, sc.StartedAt, sc.Stopped = spec.Owner.Marker(), true, cmd.Process.Pid, start, time.Now().UTC(), false
	if err := d.appendSidecar(sc); err != nil {
		_ = cmd.Process.Kill()
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

func childEnv(env map[string]string) []string {
	out := []string{basePath, "HOME=/root", "TERM=dumb"}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// ObserveNode reports Absent when the namespace is gone, Drifted when its marker or identity
// departs from the handle, Degraded when a declared main process is not (or no longer) running,
// Present otherwise. Attributes: netns, pid.
func (d *Driver) ObserveNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error) {
	obs := substrate.Observation{ExternalID: h.ExternalID, At: time.Now().UTC()}
	p, err := decode(h.Private, kindNode)
	if err != nil {
		obs.Status = substrate.Unknown
		obs.Reason = err.Error()
		return obs, fmt.Errorf("node %s: %w", owner.Address, err)
	}
	path := d.nsPath(p.Netns)
	if mounted, err := netnsMount(path); errors.Is(err, os.ErrNotExist) || (err == nil && !mounted) {
		obs.Status = substrate.Absent
		obs.Reason = "namespace " + path + " does not exist"
		return obs, nil
	} else if err != nil {
		obs.Status = substrate.Unknown
		return obs, fmt.Errorf("node %s: %w: %w", owner.Address, driver.ErrUnavailable, err)
	}
	ino, err := nsInode(path)
	if err != nil {
		obs.Status = substrate.Unknown
		return obs, fmt.Errorf("node %s: %w: %w", owner.Address, driver.ErrUnavailable, err)
	}
	obs.Attributes = map[string]string{"netns": p.Netns, "netns_path": path}
	found, merr := d.cachedMarker(d.ns(p.Netns), ino)
	if merr == nil {
		obs.Owner = &found
	}
	switch {
	case errors.Is(merr, errNsUnreadable):
		// Not being able to look is not evidence of drift: unknown, and the caller stops.
		obs.Status, obs.Reason = substrate.Unknown, merr.Error()
		return obs, fmt.Errorf("node %s: %w: %w", owner.Address, driver.ErrUnavailable, merr)
	case merr != nil || !found.Equal(owner):
		obs.Status = substrate.Drifted
		obs.Reason = "namespace " + p.Netns + " lacks this node's ownership marker"
		return obs, nil
	case p.NsInode != 0 && ino != p.NsInode:
		obs.Status = substrate.Drifted
		obs.Reason = "namespace " + p.Netns + " was replaced by another namespace of the same name"
		return obs, nil
	}
	sc, err := d.readSidecar(p.Netns)
	if err != nil {
		obs.Status = substrate.Degraded
		obs.Reason = "sidecar record unreadable: " + err.Error()
		return obs, nil
	}
	obs.Status = substrate.Present
	if sc.HasCommand {
		switch {
		case sc.Pid == 0 || sc.Stopped:
			obs.Status = substrate.Degraded
			obs.Reason = "main process not running (stopped or never started)"
		case !processAlive(sc.Pid, sc.StartTime, ino):
			obs.Status = substrate.Degraded
			obs.Reason = fmt.Sprintf("main process %d exited (log: %s)", sc.Pid, d.logPath(p.Netns))
		default:
			obs.Attributes["pid"] = strconv.Itoa(sc.Pid)
		}
	}
	return obs, nil
}

// StopNode stops the recorded main process (SIGTERM, then SIGKILL after 5 s), after checking
// ownership. The namespace and its wiring stay.
func (d *Driver) StopNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	ns, err := d.NodeNetns(ctx, h)
	if err != nil {
		if errors.Is(err, driver.ErrNotFound) {
			return nil
		}
		return err
	}
	if err := checkNsOwned(ns, owner); err != nil {
		return fmt.Errorf("node %s: %w", owner.Address, err)
	}
	sc, err := d.readSidecar(h.ExternalID)
	if err != nil {
		return fmt.Errorf("node %s: sidecar: %w", owner.Address, err)
	}
	if processAlive(sc.Pid, sc.StartTime, sc.NsInode) {
		if err := terminate(ctx, sc.Pid, sc.StartTime, sc.NsInode, 5*time.Second); err != nil {
			return fmt.Errorf("node %s: stop main process %d: %w", owner.Address, sc.Pid, err)
		}
	}
	sc.Stopped = true
	return d.appendSidecar(sc)
}

// DeleteNode checks the namespace's marker, kills every process inside it, deletes the host
// ends of its veths (so that nothing lingers while the kernel frees the namespace), and removes
// the bind mount, sidecar and log. A namespace that is already gone is not an error.
func (d *Driver) DeleteNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	p, err := decode(h.Private, kindNode)
	if err != nil {
		return fmt.Errorf("node %s: %w", owner.Address, err)
	}
	path := d.nsPath(p.Netns)
	where := fmt.Sprintf("node %s: netns %s", owner.Address, p.Netns)
	// No cached socket may keep the namespace (and the veths inside) alive past its delete.
	d.conns.forget(p.Netns)
	d.dropWired(p.Netns)
	d.hosts.forget(d.hostsPath(p.Netns))
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		// Deleted out of band (`ip netns del`), or by a delete killed after the unmount.
		if err := d.deleteGone(ctx, p.Netns, owner); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		return d.deleted(ctx, p.Netns, owner, where)
	}
	if !isNetnsMount(path) {
		if !d.ownMountPoint(p.Netns, owner) {
			return fmt.Errorf("%s: %s is not a mounted namespace: %w", where, path, driver.ErrNotOwned)
		}
		// Our own mount point, already unmounted by a delete killed before it removed the file
		// (or never mounted by a killed create): finish the delete.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", where, err)
		}
		d.removeFiles(p.Netns)
		return d.deleted(ctx, p.Netns, owner, where)
	}
	// One netlink handle for the ownership check and, once nothing runs inside, the list of
	// the node's veths.
	ns := d.ns(p.Netns)
	nh, err := ns.Netlink()
	if err != nil {
		return fmt.Errorf("%s: no sysbox ownership marker: %v: %w", where, err, driver.ErrNotOwned)
	}
	defer nh.Close()
	if !(d.pendingFor(p.Netns, owner) && unmarkedVia(nh)) {
		if err := checkOwnedVia(nh, ns, owner); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	ino, err := nsInode(path)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if p.NsInode != 0 && ino != p.NsInode {
		return fmt.Errorf("%s: namespace was replaced (inode %d, recorded %d): %w", where, ino, p.NsInode, driver.ErrNotOwned)
	}
	d.fresh.Delete(freshKey(p.Netns, ino))
	sc, _ := d.readSidecar(p.Netns) // its main process is killed first if it names one
	if err := d.emptyAndUnwire(ctx, nh, sc, ino, owner); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if err := removeNamedNetns(path); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	d.removeFiles(p.Netns)
	return d.deleted(ctx, p.Netns, owner, where)
}

// deleted ends a successful DeleteNode: the stale temporary files of its sidecar writes and
// what the previous generation left go too (leftovers.go), so that destroy's audit finds
// nothing of the resource.
func (d *Driver) deleted(ctx context.Context, name string, owner substrate.Owner, where string) error {
	if err := d.removeStaleTemps(name); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if err := d.removePrevious(ctx, owner); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	return nil
}

// ownMountPoint reports whether name's path is an empty regular file (an unmounted or
// never-mounted bind-mount target) that owner's sidecar claims. The sidecar is written before
// the mount and removed only after the file, so it outlives both crash windows.
func (d *Driver) ownMountPoint(name string, owner substrate.Owner) bool {
	fi, err := os.Lstat(d.nsPath(name))
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		return false
	}
	sc, err := d.readSidecar(name)
	return err == nil && sc.Netns == name && sc.Marker == owner.Marker()
}

func (d *Driver) removeFiles(name string) {
	removeUTS(d.utsPath(name))
	_ = os.Remove(d.hostsPath(name))
	_ = os.Remove(d.sidecarPath(name))
	_ = os.Remove(d.logPath(name))
}

// HandleFor rebuilds the handle of an existing namespace named name (for audits and scrubbing
// residue the state no longer knows); it records the namespace's current inode.
func (d *Driver) HandleFor(name string) (substrate.Handle, error) {
	path := d.nsPath(name)
	if !isNetnsMount(path) {
		return substrate.Handle{}, fmt.Errorf("netns %s: %w", name, driver.ErrNotFound)
	}
	ino, err := nsInode(path)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("netns %s: %w", name, err)
	}
	return substrate.Handle{Driver: Name, ExternalID: name, Private: encode(private{Kind: kindNode, Netns: name, NsInode: ino})}, nil
}
