package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Residue lists the node directories (with their records), the jail directories (jailed
// layout) and the TAPs that carry topology's markers. A directory whose record cannot be read
// is an error naming it, never skipped.
func (d *Driver) Residue(_ context.Context, topology string) ([]substrate.Object, error) {
	var out []substrate.Object
	jails := map[string]bool{} // jail directories listed
	entries, err := os.ReadDir(d.stateDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("firecracker residue: %s: %v: %w", d.stateDir, err, driver.ErrUnavailable)
	}
	for _, e := range entries {
		if !e.IsDir() || !validName(e.Name()) {
			continue
		}
		r, err := d.readRecord(e.Name())
		if err != nil {
			return nil, fmt.Errorf("firecracker residue: node %s: %w", e.Name(), err)
		}
		o, err := substrate.ParseMarker(r.Marker)
		if err != nil {
			return nil, fmt.Errorf("firecracker residue: node %s: %w", e.Name(), err)
		}
		if o.Topology != topology {
			continue
		}
		out = append(out, substrate.Object{Kind: "firecracker-vm", ExternalID: r.Name, Owner: o})
		if r.Jail != nil {
			dir := r.Jail.dir(r.Name)
			jails[dir] = true
			if err := checkJailOwner(dir, r.Marker); err == nil {
				out = append(out, substrate.Object{Kind: kindChroot, ExternalID: dir, Owner: o})
			}
		}
	}
	// Jail directories of the configured layout that no node record names any more.
	if d.jail != nil {
		more, err := jailResidue(filepath.Join(d.jail.Base, filepath.Base(d.binary)), topology, jails)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	links, err := linuxnet.LinkList(nil)
	if err != nil {
		return nil, fmt.Errorf("firecracker residue: links: %v: %w", err, driver.ErrUnavailable)
	}
	for _, l := range links {
		if _, ok := l.(*netlink.Tuntap); !ok {
			continue
		}
		if o, err := substrate.ParseMarker(l.Attrs().Alias); err == nil && o.Topology == topology {
			out = append(out, substrate.Object{Kind: "tap", ExternalID: l.Attrs().Name, Owner: o})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind+out[i].ExternalID < out[j].Kind+out[j].ExternalID })
	return out, nil
}

// kindChroot is a jail directory in Residue: BASE/<exec file name>/NAME.
const kindChroot = "firecracker-chroot"

// jailResidue lists the jail directories under parent (BASE/<exec file name>) whose owner file
// carries topology's marker, except those in seen. A foreign directory is not listed.
func jailResidue(parent, topology string, seen map[string]bool) ([]substrate.Object, error) {
	entries, err := os.ReadDir(parent)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("firecracker residue: %s: %v: %w", parent, err, driver.ErrUnavailable)
	}
	var out []substrate.Object
	for _, e := range entries {
		dir := filepath.Join(parent, e.Name())
		if !e.IsDir() || !validName(e.Name()) || seen[dir] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, jailOwnerFile))
		if err != nil {
			continue // not a jail sysbox made
		}
		if o, err := substrate.ParseMarker(strings.TrimSpace(string(b))); err == nil && o.Topology == topology {
			out = append(out, substrate.Object{Kind: kindChroot, ExternalID: dir, Owner: o})
		}
	}
	return out, nil
}
