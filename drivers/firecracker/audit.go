package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Residue lists the node directories (with their records) and the TAPs that carry topology's
// markers. A directory whose record cannot be read is an error naming it, never skipped.
func (d *Driver) Residue(_ context.Context, topology string) ([]substrate.Object, error) {
	var out []substrate.Object
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
		if o.Topology == topology {
			out = append(out, substrate.Object{Kind: "firecracker-vm", ExternalID: r.Name, Owner: o})
		}
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
