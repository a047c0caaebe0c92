package fake

import (
	"context"
	"encoding/json"
	"fmt"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// CreateNetwork creates (or, for the same owner, returns) a network.
func (d *Driver) CreateNetwork(ctx context.Context, spec substrate.NetworkSpec) (substrate.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "CreateNetwork"); err != nil {
		return substrate.Handle{}, err
	}
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("fake network: incomplete owner %+v", spec.Owner)
	}
	id := objectID("net", spec.Owner, "")
	m := spec.Owner.Marker()
	if n := d.world.Networks[id]; n != nil {
		if n.Marker != m {
			return substrate.Handle{}, fmt.Errorf("fake network %s: exists with another owner: %w", id, driver.ErrNotOwned)
		}
		return d.handle(id, m), nil
	}
	d.world.Networks[id] = &Network{ID: id, Marker: m, Owner: spec.Owner, CIDR: spec.IPv4CIDR}
	return d.handle(id, m), d.commit("CreateNetwork")
}

// ObserveNetwork reports the network's status.
func (d *Driver) ObserveNetwork(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ObserveNetwork"); err != nil {
		return unknown(h.ExternalID, err)
	}
	n := d.world.Networks[h.ExternalID]
	if n == nil {
		return absent(h.ExternalID), nil
	}
	return observeMarker(n.ID, n.Marker, owner), nil
}

// DeleteNetwork deletes the network after checking its marker; NICs still on it are refused.
func (d *Driver) DeleteNetwork(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "DeleteNetwork"); err != nil {
		return err
	}
	n := d.world.Networks[h.ExternalID]
	if n == nil {
		return fmt.Errorf("fake network %s: %w", h.ExternalID, driver.ErrNotFound)
	}
	if err := owned("network", n.ID, n.Marker, owner); err != nil {
		return err
	}
	for _, c := range d.world.NICs {
		if c.Network == n.ID {
			return fmt.Errorf("fake network %s: still has nic %s of node %s attached", n.ID, c.ID, c.Node)
		}
	}
	delete(d.world.Networks, n.ID)
	return d.commit("DeleteNetwork")
}

// ---- NICs ----

func nicID(node, name string) string { return node + "/" + name }

type nicPrivate struct {
	ID string `json:"id"`
}

func (d *Driver) nicOf(st substrate.AttachmentState) string {
	var p nicPrivate
	_ = json.Unmarshal(st.Private.Data, &p)
	return p.ID
}

// Attach wires the node to a network (idempotent for the same owner and name).
func (d *Driver) Attach(ctx context.Context, node substrate.Handle, spec substrate.AttachmentSpec) (substrate.AttachmentState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "Attach"); err != nil {
		return substrate.AttachmentState{}, err
	}
	n := d.world.Nodes[node.ExternalID]
	if n == nil {
		return substrate.AttachmentState{}, fmt.Errorf("fake attach %s: node %s: %w", spec.Name, node.ExternalID, driver.ErrNotFound)
	}
	if err := owned("node", n.ID, n.Marker, spec.Owner); err != nil {
		return substrate.AttachmentState{}, err
	}
	if d.world.Networks[spec.Network.ExternalID] == nil {
		return substrate.AttachmentState{}, fmt.Errorf("fake attach %s: network %s: %w", spec.Name, spec.Network.ExternalID, driver.ErrNotFound)
	}
	// The same MAC may not be live twice on one network (a prior generation must be quiesced).
	for cid := range d.byMAC[spec.Network.ExternalID+"|"+spec.MAC] {
		if c := d.world.NICs[cid]; c != nil && c.Up && c.Node != n.ID {
			return substrate.AttachmentState{}, fmt.Errorf("fake attach %s: mac %s already live on network %s (nic %s)", spec.Name, spec.MAC, c.Network, c.ID)
		}
	}
	id := nicID(n.ID, spec.Name)
	pb, _ := json.Marshal(nicPrivate{ID: id})
	st := substrate.AttachmentState{Name: spec.Name, MAC: spec.MAC, IPv4: spec.IPv4, Gateway: spec.Gateway,
		Private: substrate.Envelope{Driver: d.name, Version: envVersion, Data: pb}}
	m := spec.Owner.Marker()
	if c := d.world.NICs[id]; c != nil && c.Marker == m {
		return st, nil
	}
	if old := d.world.NICs[id]; old != nil {
		d.idxNIC(old, false)
	}
	d.world.NICs[id] = &NIC{ID: id, Marker: m, Owner: spec.Owner, Node: n.ID, Name: spec.Name,
		Network: spec.Network.ExternalID, MAC: spec.MAC, IPv4: spec.IPv4, Up: !n.Quiesced}
	d.idxNIC(d.world.NICs[id], true)
	return st, d.commit("Attach")
}

// ObserveAttachment reports the NIC's status.
func (d *Driver) ObserveAttachment(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) (substrate.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nicOf(st)
	if err := d.enter(ctx, "ObserveAttachment"); err != nil {
		return unknown(id, err)
	}
	c := d.world.NICs[id]
	if c == nil {
		return absent(id), nil
	}
	obs := observeMarker(id, c.Marker, owner)
	if obs.Status == substrate.Present && (!c.Up || c.MAC != st.MAC) {
		obs.Status, obs.Reason = substrate.Drifted, "nic down or mac changed"
	}
	return obs, nil
}

// Detach removes the NIC after checking its marker.
func (d *Driver) Detach(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "Detach"); err != nil {
		return err
	}
	id := d.nicOf(st)
	c := d.world.NICs[id]
	if c == nil {
		return fmt.Errorf("fake nic %s: %w", id, driver.ErrNotFound)
	}
	if err := owned("nic", id, c.Marker, owner); err != nil {
		return err
	}
	d.idxNIC(c, false)
	delete(d.world.NICs, id)
	return d.commit("Detach")
}

// ConfigureGuestNetwork records the routes inside the node.
func (d *Driver) ConfigureGuestNetwork(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, routes []substrate.Route) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ConfigureGuestNetwork"); err != nil {
		return err
	}
	n := d.world.Nodes[node.ExternalID]
	if n == nil {
		return fmt.Errorf("fake node %s: %w", node.ExternalID, driver.ErrNotFound)
	}
	for _, a := range atts {
		if d.world.NICs[d.nicOf(a)] == nil {
			return fmt.Errorf("fake node %s: configure %s: nic %w", n.ID, a.Name, driver.ErrNotFound)
		}
	}
	n.Routes = append([]substrate.Route(nil), routes...)
	return d.commit("ConfigureGuestNetwork")
}

var _ driver.Hosts = (*Driver)(nil)

// SetHosts records the names the node resolves (driver.Hosts), after checking its marker.
func (d *Driver) SetHosts(ctx context.Context, node substrate.Handle, owner substrate.Owner, entries []driver.HostEntry) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "SetHosts"); err != nil {
		return err
	}
	n := d.world.Nodes[node.ExternalID]
	if n == nil {
		return fmt.Errorf("fake node %s: hosts: %w", node.ExternalID, driver.ErrNotFound)
	}
	if n.Marker != owner.Marker() {
		return fmt.Errorf("fake node %s: hosts: marker is not %s's: %w", n.ID, owner.Address, driver.ErrNotOwned)
	}
	n.Hosts = map[string][]string{}
	for _, e := range entries {
		n.Hosts[e.Address] = append([]string(nil), e.Names...)
	}
	return d.commit("SetHosts")
}
