package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// A node's names (attachment aliases, S8) live in its own hosts file, StateDir/NAME.hosts: the
// host's /etc/hosts followed by the owner's marker line and the entries. The main process and
// every exec get it at /etc/hosts through a private mount namespace, as `ip netns exec` does
// with /etc/netns/NAME/hosts. A node with no hosts file sees the host's.

// hostsSource is the file a node's hosts file starts with.
var hostsSource = "/etc/hosts"

func (d *Driver) hostsPath(name string) string { return filepath.Join(d.StateDir, name+".hosts") }

// SetHosts implements driver.Hosts: it (re)writes the node's hosts file in place, so running
// processes see the change at once. The node's namespace must carry owner's marker.
func (d *Driver) SetHosts(ctx context.Context, node substrate.Handle, owner substrate.Owner, entries []driver.HostEntry) error {
	ns, err := d.NodeNetns(ctx, node)
	if err != nil {
		return fmt.Errorf("node %s: hosts: %w", owner.Address, err)
	}
	o, err := nsMarker(ns)
	if err != nil {
		return fmt.Errorf("node %s: hosts: %w", owner.Address, err)
	}
	if !o.Equal(owner) {
		return fmt.Errorf("node %s: hosts: namespace %s carries %s %s (topology %s, generation %d): %w",
			owner.Address, ns.Path, o.Type, o.Address, o.Topology, o.Generation, driver.ErrNotOwned)
	}
	base, err := os.ReadFile(hostsSource)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("node %s: hosts: %w", owner.Address, err)
	}
	if err := linuxnet.WriteHostsInPlace(d.hostsPath(filepath.Base(ns.Path)), linuxnet.RenderHosts(base, owner, entries)); err != nil {
		return fmt.Errorf("node %s: hosts: %w", owner.Address, err)
	}
	return nil
}

// mountHosts, on a locked thread already inside the node's namespaces, gives the thread (and
// what it forks) a private mount namespace with the node's hosts file over /etc/hosts. Mounts
// are made slaves first so that nothing propagates back to the host. The thread cannot be
// returned to the host's mount namespace and must be discarded.
func mountHosts(hostsFile string) error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make mounts slaves: %w", err)
	}
	if err := unix.Mount(hostsFile, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over /etc/hosts: %w", hostsFile, err)
	}
	return nil
}

// hostsResidue lists hosts files carrying topology's marker whose namespace is not listed.
func (d *Driver) hostsResidue(topology string, listed map[string]bool) ([]substrate.Object, error) {
	ents, err := os.ReadDir(d.StateDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("residue: %w", err)
	}
	var out []substrate.Object
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".hosts")
		if !ok || listed[name] {
			continue
		}
		o, err := linuxnet.HostsOwner(d.hostsPath(name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil && o.Topology == topology {
			out = append(out, substrate.Object{Kind: "netns-hosts", ExternalID: d.hostsPath(name), Owner: o})
		}
	}
	return out, nil
}
