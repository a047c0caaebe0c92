package netns

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Attach wires one attachment: a veth pair from the network's bridge into the node, the node
// side named after the logical attachment (NodeIfName), with the declared MAC (or
// linuxnet.DefaultMAC of node address + attachment name) and IPv4 prefixes.
func (d *Driver) Attach(ctx context.Context, node substrate.Handle, spec substrate.AttachmentSpec) (substrate.AttachmentState, error) {
	where := fmt.Sprintf("node %s: attachment %q", spec.Node, spec.Name)
	ns, ino, conn, err := d.nodeConn(node)
	if err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", where, err)
	}
	defer d.conns.release(conn)
	if spec.Network.ExternalID == "" {
		return substrate.AttachmentState{}, fmt.Errorf("%s: network handle has no bridge name", where)
	}
	mac, err := linuxnet.ParseMAC(spec.MAC)
	if err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", where, err)
	}
	if mac == nil {
		mac = linuxnet.DefaultMAC(spec.Node, spec.Name)
	}
	v, err := linuxnet.CreateVeth(ctx, linuxnet.VethSpec{
		HostName: HostVethName(spec.Owner, spec.Name),
		Bridge:   spec.Network.ExternalID,
		Netns:    ns,
		NodeName: NodeIfName(spec.Name),
		MAC:      mac,
		IPv4:     spec.IPv4,
		MTU:      spec.MTU,
		Owner:    spec.Owner,

		IntentDir: d.intentDir(),
		Conn:      &conn.NodeConn,
	})
	if err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", where, err)
	}
	d.noteWired(filepath.Base(ns.Path), ino, v.NodeName, spec.IPv4)
	return substrate.AttachmentState{
		Name: spec.Name, MAC: v.MAC, IPv4: append([]string(nil), spec.IPv4...), Gateway: spec.Gateway,
		Private: encode(private{Kind: kindAttachment, Veth: &v}),
	}, nil
}

// ObserveAttachment observes the veth pair (linuxnet.ObserveVeth).
func (d *Driver) ObserveAttachment(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) (substrate.Observation, error) {
	p, err := decode(st.Private, kindAttachment)
	if err != nil {
		return substrate.Observation{Status: substrate.Unknown, Reason: err.Error(), At: time.Now().UTC()}, fmt.Errorf("node %s: attachment %q: %w", owner.Address, st.Name, err)
	}
	return linuxnet.ObserveVeth(ctx, *p.Veth, owner)
}

// Detach deletes the veth pair after checking its marker.
func (d *Driver) Detach(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) error {
	p, err := decode(st.Private, kindAttachment)
	if err != nil {
		return fmt.Errorf("node %s: attachment %q: %w", owner.Address, st.Name, err)
	}
	if err := linuxnet.DeleteVethWithIntents(ctx, p.Veth.HostName, owner, d.intentDir()); err != nil {
		return fmt.Errorf("node %s: attachment %q: %w", owner.Address, st.Name, err)
	}
	return nil
}

// ConfigureGuestNetwork brings loopback and every attachment up with its addresses, then sets
// routes; the first attachment with a gateway gives the default route unless routes name one.
// What this Driver itself did moments before is not redone: loopback up in a namespace it
// created, and the addresses and link state of interfaces it wired (Attach) with exactly these
// addresses. An attachment wired by another process (a run that crashed) is configured in full.
func (d *Driver) ConfigureGuestNetwork(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, routes []substrate.Route) error {
	ns, ino, conn, err := d.nodeConn(node)
	if err != nil {
		return err
	}
	defer d.conns.release(conn)
	done := d.takeWired(filepath.Base(ns.Path), ino)
	var ifs []linuxnet.GuestInterface
	for _, a := range atts {
		p, err := decode(a.Private, kindAttachment)
		if err != nil {
			return fmt.Errorf("node %s: attachment %q: %w", node.ExternalID, a.Name, err)
		}
		ifc := linuxnet.GuestInterface{Name: p.Veth.NodeName, IPv4: a.IPv4, Gateway: a.Gateway}
		if done != nil {
			if want, ok := done.ifs[ifc.Name]; ok && slices.Equal(want, a.IPv4) {
				ifc.Wired = true
			}
		}
		ifs = append(ifs, ifc)
	}
	if err := linuxnet.ConfigureGuestVia(ctx, conn.NH, ns, done != nil && done.loUp, ifs, routes); err != nil {
		return fmt.Errorf("node %s: guest network: %w", node.ExternalID, err)
	}
	return nil
}
