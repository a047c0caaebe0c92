package fake

import (
	"context"
	"fmt"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// ApplyPolicy installs (replacing atomically) the node's policy table and reads it back.
func (d *Driver) ApplyPolicy(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ApplyPolicy"); err != nil {
		return substrate.Handle{}, err
	}
	n := d.world.Nodes[node.ExternalID]
	if n == nil {
		return substrate.Handle{}, fmt.Errorf("fake policy: node %s: %w", node.ExternalID, driver.ErrNotFound)
	}
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("fake policy: incomplete owner %+v", spec.Owner)
	}
	names := map[string]bool{}
	for _, a := range atts {
		names[a.Name] = true
	}
	for _, ref := range policyAttachments(spec) {
		if !names[ref] {
			return substrate.Handle{}, fmt.Errorf("fake policy %s: attachment %q not wired on node %s", spec.Owner.Address, ref, n.ID)
		}
	}
	id := policyID(n.ID, spec.Owner)
	m := spec.Owner.Marker()
	if p := d.world.Policies[id]; p != nil && p.Marker != m {
		if err := owned("policy", id, p.Marker, spec.Owner); err != nil {
			return substrate.Handle{}, err
		}
	}
	d.world.Policies[id] = &Policy{ID: id, Marker: m, Owner: spec.Owner, Node: n.ID, Digest: spec.Digest()}
	d.idxPolicy(d.world.Policies[id], true)
	if err := d.commit("ApplyPolicy"); err != nil {
		return substrate.Handle{}, err
	}
	if d.world.Policies[id].Digest != spec.Digest() { // readback
		return substrate.Handle{}, fmt.Errorf("fake policy %s: readback differs", id)
	}
	return d.handle(id, m), nil
}

func policyID(node string, o substrate.Owner) string { return "pol-" + node + "-" + o.ShortID(8) }

func policyAttachments(spec substrate.PolicySpec) []string {
	var out []string
	if spec.Firewall != nil {
		for _, r := range spec.Firewall.Rules {
			if r.Attachment != "" {
				out = append(out, r.Attachment)
			}
		}
	}
	if spec.Router != nil {
		for _, m := range spec.Router.Masquerade {
			out = append(out, m.OutAttachment)
		}
		for _, p := range spec.Router.PortForwards {
			out = append(out, p.InAttachment)
		}
	}
	return out
}

// ObservePolicy compares the installed digest with spec's.
func (d *Driver) ObservePolicy(ctx context.Context, node substrate.Handle, h substrate.Handle, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ObservePolicy"); err != nil {
		return unknown(h.ExternalID, err)
	}
	p := d.world.Policies[h.ExternalID]
	if p == nil || p.Node != node.ExternalID {
		return absent(h.ExternalID), nil
	}
	obs := observeMarker(p.ID, p.Marker, spec.Owner)
	if obs.Status == substrate.Present && p.Digest != spec.Digest() {
		obs.Status, obs.Reason = substrate.Drifted, "installed policy digest "+p.Digest+" differs from "+spec.Digest()
	}
	obs.Attributes = map[string]string{"digest": p.Digest}
	return obs, nil
}

// DeletePolicy removes the table after checking its marker.
func (d *Driver) DeletePolicy(ctx context.Context, node substrate.Handle, h substrate.Handle, owner substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "DeletePolicy"); err != nil {
		return err
	}
	p := d.world.Policies[h.ExternalID]
	if p == nil {
		return fmt.Errorf("fake policy %s: %w", h.ExternalID, driver.ErrNotFound)
	}
	if err := owned("policy", p.ID, p.Marker, owner); err != nil {
		return err
	}
	d.idxPolicy(p, false)
	delete(d.world.Policies, p.ID)
	return d.commit("DeletePolicy")
}
