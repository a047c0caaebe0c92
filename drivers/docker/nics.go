package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

const nicPrivateVersion = 1

// nicPrivate is the NIC capability's private part of an AttachmentState.
type nicPrivate struct {
	HostIf  string `json:"host_if"`
	GuestIf string `json:"guest_if"`
	Bridge  string `json:"bridge,omitempty"`
	Marker  string `json:"marker"` // the node owner the NIC was wired for
}

func nicEnvelope(p nicPrivate) substrate.Envelope {
	return substrate.Seal(Name, nicPrivateVersion, p)
}

func decodeNICPrivate(env substrate.Envelope) (nicPrivate, error) {
	var p nicPrivate
	if err := env.Open(Name, nicPrivateVersion, &p); err != nil {
		return p, fmt.Errorf("attachment %w", err)
	}
	if p.HostIf == "" || p.GuestIf == "" {
		return p, fmt.Errorf("attachment envelope lacks device names")
	}
	return p, nil
}

// Attach wires spec's attachment: a veth whose host side joins the network's bridge
// (spec.Network.ExternalID) and whose peer, with spec.MAC, is created inside the container's
// namespace. A created container is started first: its namespace exists only while it runs.
func (d *Driver) Attach(ctx context.Context, node substrate.Handle, spec substrate.AttachmentSpec) (substrate.AttachmentState, error) {
	what := fmt.Sprintf("node %s: attachment %s", spec.Node, spec.Name)
	if spec.Network.ExternalID == "" {
		return substrate.AttachmentState{}, fmt.Errorf("%s: network handle names no bridge", what)
	}
	mac := linuxnet.DefaultMAC(spec.Node, spec.Name) // the same rule the netns driver uses
	if spec.MAC != "" {
		m, err := net.ParseMAC(spec.MAC)
		if err != nil || len(m) != 6 {
			return substrate.AttachmentState{}, fmt.Errorf("%s: mac %q: want a 48-bit MAC address", what, spec.MAC)
		}
		mac = m
	}
	r, err := d.ensureRunning(ctx, what, node, spec.Owner)
	if err != nil {
		return substrate.AttachmentState{}, err
	}
	p := nicPrivate{HostIf: hostIfName(spec.Owner, spec.Name), GuestIf: guestIfName(spec.Name),
		Bridge: spec.Network.ExternalID, Marker: spec.Owner.Marker()}
	// The NIC record is written before the veth exists, so that every host link this driver
	// may have made for the container is named in it, even after a crash mid-wiring:
	// DeleteNode removes exactly the recorded links instead of listing every host link.
	if err := d.updateSidecar(r.ID, spec.Owner, func(n map[string]nicPrivate) { n[spec.Name] = p }); err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: container %s: %w", what, short(r.ID), err)
	}
	unrecord := func(err error) error {
		// Nothing is wired (wireVeth and the cleanup below remove what they made): drop the record.
		if uerr := d.updateSidecar(r.ID, spec.Owner, func(n map[string]nicPrivate) { delete(n, spec.Name) }); uerr != nil {
			err = errors.Join(err, fmt.Errorf("drop the record of the NIC not wired: %w", uerr))
		}
		return fmt.Errorf("%s: container %s: %w", what, short(r.ID), err)
	}
	err = wireVeth(r.Pid, vethSpec{HostIf: p.HostIf, GuestIf: p.GuestIf, Bridge: p.Bridge, MAC: mac,
		MTU: spec.MTU, Alias: nicAlias(spec.Owner, spec.Name)})
	if err != nil {
		return substrate.AttachmentState{}, unrecord(err)
	}
	// Addresses go on with the wiring (as the netns driver does), so a NIC re-attached during
	// recovery answers even before ConfigureGuestNetwork runs again; gateway and routes follow there.
	if err := linuxnet.ConfigureGuest(ctx, linuxnet.PidNetns(r.Pid), []linuxnet.GuestInterface{{Name: p.GuestIf, IPv4: spec.IPv4}}, nil); err != nil {
		if derr := deleteHostLink(p.HostIf, nicAlias(spec.Owner, spec.Name)); derr != nil {
			return substrate.AttachmentState{}, fmt.Errorf("%s: container %s: %w", what, short(r.ID), errors.Join(err, derr))
		}
		return substrate.AttachmentState{}, unrecord(err)
	}
	return substrate.AttachmentState{Name: spec.Name, MAC: mac.String(), IPv4: spec.IPv4, Gateway: spec.Gateway,
		Private: nicEnvelope(p)}, nil
}

// ConfigureGuestNetwork sets each attachment's addresses and the routes from the host, through
// a netlink handle inside the container's namespace (linuxnet.ConfigureGuest).
func (d *Driver) ConfigureGuestNetwork(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, routes []substrate.Route) error {
	what := "configure network of container " + short(node.ExternalID)
	r, ok := d.live.lookup(node.ExternalID)
	if !ok {
		ins, err := d.cli.ContainerInspect(ctx, node.ExternalID)
		if err != nil {
			return d.containerErr(what, node.ExternalID, err)
		}
		if r, ok = d.live.note(ins); !ok {
			return fmt.Errorf("%s: container is not running", what)
		}
	}
	var ifaces []linuxnet.GuestInterface
	for _, a := range atts {
		p, err := decodeNICPrivate(a.Private)
		if err != nil {
			return fmt.Errorf("%s: attachment %s: %w", what, a.Name, err)
		}
		ifaces = append(ifaces, linuxnet.GuestInterface{Name: p.GuestIf, IPv4: a.IPv4, Gateway: a.Gateway})
	}
	// The same rules as the netns driver's nodes: addresses, links up, then routes, the first
	// gateway becoming the default route unless a route names 0.0.0.0/0.
	if err := linuxnet.ConfigureGuest(ctx, linuxnet.PidNetns(r.Pid), ifaces, routes); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// ObserveAttachment reports absent (container or NIC gone: a restarted container has a fresh
// namespace), drifted (another marker, MAC or a missing address), degraded (host side missing,
// off its bridge or down) or present.
func (d *Driver) ObserveAttachment(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) (substrate.Observation, error) {
	what := fmt.Sprintf("observe attachment %s of %s", st.Name, owner.Address)
	obs := substrate.Observation{ExternalID: node.ExternalID, At: observedAt()}
	p, err := decodeNICPrivate(st.Private)
	if err != nil {
		return obs, fmt.Errorf("%s: %w", what, err)
	}
	ins, err := d.cli.ContainerInspect(ctx, node.ExternalID)
	if err != nil {
		err = d.containerErr(what, node.ExternalID, err)
		if !isNotFound(err) {
			return unknown(node.ExternalID, err), err
		}
		obs.Status, obs.Reason = substrate.Absent, "container "+short(node.ExternalID)+" does not exist"
		return obs, nil
	}
	if ins.State == nil || !ins.State.Running || ins.State.Pid <= 0 {
		obs.Status, obs.Reason = substrate.Absent, "container is not running, so its namespace and NICs are gone"
		return obs, nil
	}
	obs.ExternalID = p.HostIf
	l, ips, err := guestLink(ins.State.Pid, p.GuestIf)
	if err != nil {
		return unknown(p.HostIf, err), fmt.Errorf("%s: %w", what, err)
	}
	if l == nil {
		obs.Status, obs.Reason = substrate.Absent, "interface "+p.GuestIf+" is missing in the container"
		return obs, nil
	}
	alias := nicAlias(owner, st.Name)
	var missing []string
	for _, want := range st.IPv4 {
		if !slices.Contains(ips, want) {
			missing = append(missing, want)
		}
	}
	switch {
	case l.Attrs().Alias != alias:
		obs.Status, obs.Reason = substrate.Drifted, "interface "+p.GuestIf+" carries another marker"
	case !strings.EqualFold(l.Attrs().HardwareAddr.String(), st.MAC):
		obs.Status, obs.Reason = substrate.Drifted, fmt.Sprintf("interface %s has MAC %s, want %s", p.GuestIf, l.Attrs().HardwareAddr, st.MAC)
	case len(missing) > 0:
		obs.Status, obs.Reason = substrate.Drifted, fmt.Sprintf("interface %s lacks %s", p.GuestIf, strings.Join(missing, ", "))
	default:
		if issue := hostSideIssue(p.HostIf, alias); issue != "" {
			obs.Status, obs.Reason = substrate.Degraded, issue
		} else {
			obs.Status = substrate.Present
		}
	}
	return obs, nil
}

// Detach removes the attachment's veth pair after checking the host side's marker.
func (d *Driver) Detach(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) error {
	what := fmt.Sprintf("detach %s from %s", st.Name, owner.Address)
	p, err := decodeNICPrivate(st.Private)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := deleteHostLink(p.HostIf, nicAlias(owner, st.Name)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if node.ExternalID != "" {
		if err := d.updateSidecar(node.ExternalID, owner, func(n map[string]nicPrivate) { delete(n, st.Name) }); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	return nil
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, driver.ErrNotFound) }
