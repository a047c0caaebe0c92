package fake

import (
	"context"
	"sort"

	"zyvor.dev/sysbox/pkg/substrate"
)

// Residue lists every object carrying topology's markers, sorted by kind and id.
func (d *Driver) Residue(ctx context.Context, topology string) ([]substrate.Object, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "Residue"); err != nil {
		return nil, err
	}
	var out []substrate.Object
	add := func(kind, id, marker string) {
		if o, err := substrate.ParseMarker(marker); err == nil && o.Topology == topology {
			out = append(out, substrate.Object{Kind: kind, ExternalID: id, Owner: o})
		}
	}
	for _, n := range d.world.Networks {
		add(KindNetwork, n.ID, n.Marker)
	}
	for _, n := range d.world.Nodes {
		add(KindNode, n.ID, n.Marker)
	}
	for _, c := range d.world.NICs {
		add(KindNIC, c.ID, c.Marker)
	}
	for _, p := range d.world.Policies {
		add(KindPolicy, p.ID, p.Marker)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].ExternalID < out[j].ExternalID
	})
	return out, nil
}
