package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// What a node keeps in StateDir is named after its namespace, NAME = NetnsName(owner): NAME.json
// (sidecar), NAME.hosts, NAME.log, NAME.uts, and, from a sidecar write killed before its rename,
// .NAME.json.tmp-DIGITS (durable.TempTarget). A delete removes its own generation's files. Two
// things escape it:
//
//   - the files of a generation whose namespace was deleted out of band (`ip netns del`): once
//     observed absent, the node is re-created as the next generation and state forgets the old
//     one, so no delete of it ever comes. CreateNode and DeleteNode of generation N remove
//     generation N-1's files when its namespace is gone (removePrevious; by induction every
//     earlier generation went with the CreateNode that followed it);
//   - temporary files of a killed process's sidecar writes. Each sidecar write (before it
//     writes) and each delete (after it) removes the stale ones of its namespace name
//     (removeStaleTemps).

// processStart is when this process started, as near as its package initialisation: a
// temporary file last modified before it was written by an earlier process.
var processStart = time.Now()

// tempIndex lists the temporary files of sidecar writes in StateDir once per Driver (the CLI
// builds a Driver per command) by the namespace name they were for, so that a write or delete
// finds its own without listing the directory each time (which would make an apply of N nodes
// O(N²)). Only files there at the listing are candidates: a killed writer's files predate the
// run that cleans them, as the state lock orders runs. A Driver kept across runs finds later
// ones only in the residue audit.
type tempIndex struct {
	mu     sync.Mutex
	listed bool
	byName map[string][]string
}

// removeStaleTemps removes the temporary files of name's sidecar writes that were last written
// before this process started. Callers hold the topology's state lock, so no other process
// writes name's sidecar, and in this process only the caller's operation does.
func (d *Driver) removeStaleTemps(name string) error {
	x := &d.temps
	x.mu.Lock()
	if !x.listed {
		f, err := os.Open(d.StateDir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			x.mu.Unlock()
			return fmt.Errorf("temporary files: %w", err)
		}
		var names []string
		if err == nil {
			names, err = f.Readdirnames(-1) // unsorted: no stat, no sort
			f.Close()
			if err != nil {
				x.mu.Unlock()
				return fmt.Errorf("temporary files: %s: %w", d.StateDir, err)
			}
		}
		x.byName = map[string][]string{}
		for _, n := range names {
			if target, ok := durable.TempTarget(n); ok {
				if ns, ok := strings.CutSuffix(target, ".json"); ok {
					x.byName[ns] = append(x.byName[ns], n)
				}
			}
		}
		x.listed = true
	}
	temps := x.byName[name]
	delete(x.byName, name)
	x.mu.Unlock()
	for _, n := range temps {
		if err := removeStaleTemp(filepath.Join(d.StateDir, n)); err != nil {
			return fmt.Errorf("temporary files: %w", err)
		}
	}
	return nil
}

// removeStaleTemp removes path if it is a regular file last written before this process
// started.
func removeStaleTemp(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || !fi.ModTime().Before(processStart) {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// removePrevious removes what generation N-1 of owner's resource left when its namespace is
// gone from NetnsDir, as DeleteNode of it would (deleteGone), with its stale temporary files. A
// mounted namespace or a placeholder file is no leftover; files whose ownership cannot be shown
// (another owner's, a damaged sidecar) are left to the residue audit.
func (d *Driver) removePrevious(ctx context.Context, owner substrate.Owner) error {
	if owner.Generation <= 1 {
		return nil
	}
	prev := owner
	prev.Generation--
	name := NetnsName(prev)
	if _, err := os.Lstat(d.nsPath(name)); !errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := d.deleteGone(ctx, name, prev)
	if errors.Is(err, driver.ErrNotOwned) || errors.Is(err, errSidecarUnreadable) {
		return nil
	}
	if err == nil {
		err = d.removeStaleTemps(name)
	}
	if err != nil {
		return fmt.Errorf("previous generation, netns %s: %w", name, err)
	}
	return nil
}

// deleteUnnamed deletes what is left of the namespace sc records for owner after its name is
// gone from NetnsDir: nothing, unless the recorded main process still runs in it (a namespace
// lives as long as a process does). Then, after the namespace's marker is checked through that
// process, every process in it is killed and its veths' host ends deleted, as DeleteNode does
// for a named one.
func (d *Driver) deleteUnnamed(ctx context.Context, sc sidecar, owner substrate.Owner) error {
	if sc.NsInode == 0 || !processAlive(sc.Pid, sc.StartTime, sc.NsInode) {
		return nil
	}
	ns := linuxnet.Netns{Path: "/proc/" + strconv.Itoa(sc.Pid) + "/ns/net"}
	nh, err := ns.Netlink()
	if err != nil {
		if !processAlive(sc.Pid, sc.StartTime, sc.NsInode) {
			return nil // exited meanwhile, and its namespace with it
		}
		return fmt.Errorf("main process %d: %w", sc.Pid, err)
	}
	defer nh.Close()
	// The handle pins the namespace it opened; it must be the recorded one, carrying owner's
	// marker (a pid reused since the check above is another process's namespace).
	if ino, err := nsInode(ns.Path); err != nil || ino != sc.NsInode || !processAlive(sc.Pid, sc.StartTime, sc.NsInode) {
		return nil
	}
	if err := checkOwnedVia(nh, ns, owner); err != nil {
		return err
	}
	return d.emptyAndUnwire(ctx, nh, sc, sc.NsInode, owner)
}

// emptyAndUnwire kills every process in the namespace with inode ino (sc's main process
// first: usually the only one, so that the scan of /proc finds the namespace empty at once),
// then deletes the host ends of its veths and the veths owner's intents name.
func (d *Driver) emptyAndUnwire(ctx context.Context, nh *netlink.Handle, sc sidecar, ino uint64, owner substrate.Owner) error {
	if processAlive(sc.Pid, sc.StartTime, ino) {
		killAndWait(sc.Pid, sc.StartTime, ino, time.Second)
	}
	if err := killNetnsProcesses(ino, 5*time.Second); err != nil {
		return err
	}
	links, err := hostPeersOf(nh, owner)
	if err != nil {
		return err
	}
	intents, err := linuxnet.Intents(d.intentDir(), owner.Topology)
	if err != nil {
		return err
	}
	for _, in := range intents {
		if in.Owner.Equal(owner) {
			links = append(links, strings.TrimSuffix(filepath.Base(in.ExternalID), ".intent"))
		}
	}
	for _, l := range links {
		if err := linuxnet.DeleteVethWithIntents(ctx, l, owner, d.intentDir()); err != nil {
			return err
		}
	}
	return nil
}

// errSidecarUnreadable: a sidecar exists but cannot be read or decoded.
var errSidecarUnreadable = errors.New("unreadable sidecar")

// deleteGone finishes the delete of owner's node whose namespace is gone from NetnsDir: after
// checking that the sidecar, if any, records owner, it deletes what the namespace left
// (deleteUnnamed) and removes the node's files. A sidecar that cannot be read is an error:
// whose files they are is then unknown.
func (d *Driver) deleteGone(ctx context.Context, name string, owner substrate.Owner) error {
	sc, err := d.readSidecar(name)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("sidecar %s: %w: %w", d.sidecarPath(name), errSidecarUnreadable, err)
	case sc.Netns != name || sc.Marker != owner.Marker():
		return fmt.Errorf("sidecar %s records %q for netns %s, not %s: %w", d.sidecarPath(name), sc.Marker, sc.Netns, owner.Marker(), driver.ErrNotOwned)
	default:
		if err := d.deleteUnnamed(ctx, sc, owner); err != nil {
			return err
		}
		// A namespace whose name and processes are gone dies, and the kernel then removes its
		// veths — asynchronously: under load seconds later, after this delete and even after
		// destroy's audit (or never, while anything else holds the namespace). Host ends still
		// carrying exactly owner's marker go now. Only when the sidecar shows a real leftover: a
		// cleanly deleted previous generation has none, and listing every host link per node
		// would make a destroy of reset nodes O(N²).
		ends, err := linuxnet.HostLinksOf(owner)
		if err != nil {
			return fmt.Errorf("netns %s: host ends of %s: %w", name, owner.Address, err)
		}
		for _, l := range ends {
			if err := linuxnet.DeleteVethWithIntents(ctx, l, owner, d.intentDir()); err != nil {
				return err
			}
		}
	}
	if o, err := linuxnet.HostsOwner(d.hostsPath(name)); err == nil && !o.SameResource(owner) {
		return fmt.Errorf("hosts file %s names %s %s (topology %s): %w", d.hostsPath(name), o.Type, o.Address, o.Topology, driver.ErrNotOwned)
	}
	d.removeFiles(name)
	return nil
}
