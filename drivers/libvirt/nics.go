package libvirt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

const nicPrivateVersion = 1

// nicPrivate is the NIC capability's private part of an AttachmentState.
type nicPrivate struct {
	Tap    string `json:"tap"`
	Bridge string `json:"bridge"`
	Marker string `json:"marker"` // the node owner the tap was made for
}

func nicEnvelope(p nicPrivate) substrate.Envelope {
	return substrate.Seal(Name, nicPrivateVersion, p)
}

func decodeNICPrivate(env substrate.Envelope) (nicPrivate, error) {
	var p nicPrivate
	if err := env.Open(Name, nicPrivateVersion, &p); err != nil {
		return p, fmt.Errorf("attachment %w", err)
	}
	if p.Tap == "" {
		return p, fmt.Errorf("attachment envelope lacks the tap name")
	}
	return p, nil
}

// tapName is the deterministic tap of one attachment of one node generation (generations
// differ, so a reset's new domain gets its own taps while the prior one still holds its own).
func tapName(o substrate.Owner, attachment string) string {
	return linuxnet.IfName("svt", o.Topology, o.Address, o.Type, strconv.FormatUint(o.Generation, 10), attachment)
}

// Attach wires spec's attachment: a persistent tap (marker = node owner) enslaved to the
// network's bridge and added to the domain's definition as <interface type='ethernet'> with
// the declared MAC (and hot-plugged too when the domain runs). A retried attach converges.
func (d *Driver) Attach(ctx context.Context, node substrate.Handle, spec substrate.AttachmentSpec) (substrate.AttachmentState, error) {
	what := fmt.Sprintf("node %s: attachment %s", spec.Node, spec.Name)
	if spec.Network.ExternalID == "" {
		return substrate.AttachmentState{}, fmt.Errorf("%s: network handle names no bridge", what)
	}
	mac := linuxnet.DefaultMAC(spec.Node, spec.Name) // the same rule the netns driver uses
	if spec.MAC != "" {
		m, err := net.ParseMAC(spec.MAC)
		if err != nil || len(m) != 6 {
			return substrate.AttachmentState{}, fmt.Errorf("%s: mac %q: want a 48-bit MAC address: %w", what, spec.MAC, driver.ErrInvalid)
		}
		mac = m
	}
	d.nics.Lock()
	defer d.nics.Unlock()
	c, dom, x, err := d.lookupOwned(ctx, what, node, spec.Owner)
	if err != nil {
		return substrate.AttachmentState{}, err
	}
	p := nicPrivate{Tap: tapName(spec.Owner, spec.Name), Bridge: spec.Network.ExternalID, Marker: spec.Owner.Marker()}
	if err := ensureTap(p.Tap, p.Bridge, spec.MTU, spec.Owner); err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", what, err)
	}
	if ifc, ok := findNIC(x, p.Tap); ok {
		if ifc.MAC == nil || !strings.EqualFold(ifc.MAC.Address, mac.String()) {
			return substrate.AttachmentState{}, fmt.Errorf("%s: domain %s already has an interface on tap %s with another MAC; detach it first", what, dom.Name, p.Tap)
		}
	} else {
		dev := nicDevice(p.Tap, mac.String())
		dev.Alias = attachmentAlias(spec.Name) // names the attachment for ImportNode
		doc, err := dev.Marshal()
		if err != nil {
			return substrate.AttachmentState{}, fmt.Errorf("%s: interface XML: %w", what, err)
		}
		flags := uint32(golibvirt.DomainDeviceModifyConfig)
		if up, _, err := running(c, dom); err != nil {
			return substrate.AttachmentState{}, fmt.Errorf("%s: %w", what, err)
		} else if up {
			flags |= uint32(golibvirt.DomainDeviceModifyLive)
		}
		if err := c.DomainAttachDeviceFlags(dom, doc, flags); err != nil {
			return substrate.AttachmentState{}, apiErr(fmt.Sprintf("%s: domain %s: add interface on %s", what, dom.Name, p.Tap), err)
		}
	}
	return substrate.AttachmentState{Name: spec.Name, MAC: mac.String(), IPv4: spec.IPv4, Gateway: spec.Gateway,
		Private: nicEnvelope(p)}, nil
}

// ensureTap creates the persistent tap (or adopts one carrying exactly owner's marker), marks
// it, enslaves it to bridge and sets it up. A link of that name without the marker is refused.
func ensureTap(name, bridge string, mtu int, owner substrate.Owner) error {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", bridge, err)
	}
	if br.Type() != "bridge" {
		return fmt.Errorf("%s is a %s, not a bridge", bridge, br.Type())
	}
	link, err := netlink.LinkByName(name)
	switch {
	case err == nil:
		if err := tapOwned(link, owner); err != nil {
			return err
		}
	case linkNotFound(err):
		t := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu, TxQLen: -1},
			Mode: netlink.TUNTAP_MODE_TAP, Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_ONE_QUEUE, Queues: 1}
		if mtu == 0 {
			t.MTU = br.Attrs().MTU
		}
		if err := netlink.LinkAdd(t); err != nil {
			return fmt.Errorf("tap %s: create: %w", name, err)
		}
		for _, f := range t.Fds { // QEMU opens the tap itself; persistence keeps it
			f.Close()
		}
		// The kernel ignores an alias given at creation; mark it at once. A crash in between
		// leaves an unmarked tap that is never adopted (the audit cannot see it either).
		if link, err = netlink.LinkByName(name); err == nil {
			err = netlink.LinkSetAlias(link, owner.Marker())
		}
		if err != nil {
			_ = netlink.LinkDel(t)
			return fmt.Errorf("tap %s: mark: %w", name, err)
		}
	default:
		return fmt.Errorf("tap %s: %w: %w", name, driver.ErrUnavailable, err)
	}
	if link.Attrs().MasterIndex != br.Attrs().Index {
		if err := netlink.LinkSetMasterByIndex(link, br.Attrs().Index); err != nil {
			return fmt.Errorf("tap %s: enslave to %s: %w", name, bridge, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("tap %s: up: %w", name, err)
	}
	return nil
}

// tapOwned checks that link is a tap carrying exactly owner's marker.
func tapOwned(link netlink.Link, owner substrate.Owner) error {
	name := link.Attrs().Name
	if !owner.Complete() {
		return fmt.Errorf("tap %s: incomplete owner %+v: %w", name, owner, driver.ErrNotOwned)
	}
	found, err := substrate.ParseMarker(link.Attrs().Alias)
	if err != nil {
		return fmt.Errorf("tap %s: no sysbox ownership marker (alias %q): %w", name, link.Attrs().Alias, driver.ErrNotOwned)
	}
	if !found.Equal(owner) {
		return fmt.Errorf("tap %s: owned by %s %s generation %d (topology %s), not %s generation %d: %w",
			name, found.Type, found.Address, found.Generation, found.Topology, owner.Address, owner.Generation, driver.ErrNotOwned)
	}
	if link.Type() != "tuntap" {
		return fmt.Errorf("tap %s: is a %s: %w", name, link.Type(), driver.ErrNotOwned)
	}
	return nil
}

func linkNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// ObserveAttachment reports absent (domain, tap or interface gone), drifted (another marker or
// MAC), degraded (tap off its bridge or down) or present.
func (d *Driver) ObserveAttachment(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) (substrate.Observation, error) {
	what := fmt.Sprintf("observe attachment %s of %s", st.Name, owner.Address)
	obs := substrate.Observation{ExternalID: node.ExternalID, At: observedAt()}
	p, err := decodeNICPrivate(st.Private)
	if err != nil {
		return obs, fmt.Errorf("%s: %w", what, err)
	}
	c, dom, err := d.lookup(ctx, node)
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
		if !errors.Is(err, driver.ErrNotFound) {
			return unknown(node.ExternalID, err), err
		}
		obs.Status, obs.Reason = substrate.Absent, "domain "+node.ExternalID+" does not exist"
		return obs, nil
	}
	x, err := domainXML(c, dom)
	if err != nil {
		return unknown(node.ExternalID, err), fmt.Errorf("%s: %w", what, err)
	}
	obs.ExternalID = p.Tap
	link, err := netlink.LinkByName(p.Tap)
	if linkNotFound(err) {
		obs.Status, obs.Reason = substrate.Absent, "tap "+p.Tap+" does not exist"
		return obs, nil
	}
	if err != nil {
		return unknown(p.Tap, err), fmt.Errorf("%s: tap %s: %w: %w", what, p.Tap, driver.ErrUnavailable, err)
	}
	ifc, hasNIC := findNIC(x, p.Tap)
	switch {
	case !hasNIC:
		obs.Status, obs.Reason = substrate.Absent, "domain "+dom.Name+" has no interface on tap "+p.Tap
	case tapOwned(link, owner) != nil:
		obs.Status, obs.Reason = substrate.Drifted, tapOwned(link, owner).Error()
	case ifc.MAC == nil || !strings.EqualFold(ifc.MAC.Address, st.MAC):
		obs.Status, obs.Reason = substrate.Drifted, fmt.Sprintf("domain interface on %s does not have MAC %s", p.Tap, st.MAC)
	default:
		br, berr := netlink.LinkByName(p.Bridge)
		switch {
		case berr != nil || link.Attrs().MasterIndex != br.Attrs().Index:
			obs.Status, obs.Reason = substrate.Degraded, "tap "+p.Tap+" is not enslaved to bridge "+p.Bridge
		case link.Attrs().Flags&net.FlagUp == 0:
			obs.Status, obs.Reason = substrate.Degraded, "tap "+p.Tap+" is down"
		default:
			obs.Status = substrate.Present
		}
	}
	obs.Attributes = map[string]string{"tap": p.Tap, "mac": st.MAC}
	return obs, nil
}

// Detach removes the attachment's interface from the domain (definition, and live when it
// runs) and deletes its tap, after checking the tap's marker and the domain's metadata.
func (d *Driver) Detach(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) error {
	what := fmt.Sprintf("detach %s from %s", st.Name, owner.Address)
	p, err := decodeNICPrivate(st.Private)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	d.nics.Lock()
	defer d.nics.Unlock()
	link, err := netlink.LinkByName(p.Tap)
	switch {
	case err == nil:
		if err := tapOwned(link, owner); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	case !linkNotFound(err):
		return fmt.Errorf("%s: tap %s: %w: %w", what, p.Tap, driver.ErrUnavailable, err)
	}
	c, dom, x, err := d.lookupOwned(ctx, what, node, owner)
	switch {
	case errors.Is(err, driver.ErrNotFound):
	case err != nil:
		return err
	default:
		if ifc, ok := findNIC(x, p.Tap); ok {
			doc, err := ifc.Marshal()
			if err != nil {
				return fmt.Errorf("%s: interface XML: %w", what, err)
			}
			up, _, err := running(c, dom)
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
			flags := uint32(golibvirt.DomainDeviceModifyConfig)
			// A live unplug needs the guest's cooperation (ACPI); if it is refused, the tap's
			// deletion below cuts the NIC off anyway.
			if up && c.DomainDetachDeviceFlags(dom, doc, flags|uint32(golibvirt.DomainDeviceModifyLive)) == nil {
				flags = 0
			}
			if flags != 0 {
				if err := c.DomainDetachDeviceFlags(dom, doc, flags); err != nil {
					return apiErr(fmt.Sprintf("%s: domain %s: remove interface on %s", what, dom.Name, p.Tap), err)
				}
			}
		}
	}
	if link != nil {
		if err := netlink.LinkDel(link); err != nil && !linkNotFound(err) {
			return fmt.Errorf("%s: tap %s: delete: %w", what, p.Tap, err)
		}
	}
	return nil
}

// deleteTapsOf deletes every host link carrying exactly owner's marker (the node generation's
// taps), each re-checked before deletion.
func deleteTapsOf(ctx context.Context, owner substrate.Owner) error {
	taps, err := linuxnet.HostLinksOf(owner)
	if err != nil {
		return err
	}
	for _, t := range taps {
		if err := linuxnet.DeleteVeth(ctx, t, owner); err != nil { // any marked link: checks the marker, deletes
			return fmt.Errorf("tap %s: %w", t, err)
		}
	}
	return nil
}

// tapResidue lists taps carrying a marker of topology.
func tapResidue(topology string) ([]substrate.Object, error) {
	links, err := linuxnet.LinkList(nil)
	if err != nil {
		return nil, fmt.Errorf("list links: %w: %w", driver.ErrUnavailable, err)
	}
	var out []substrate.Object
	for _, l := range links {
		o, err := substrate.ParseMarker(l.Attrs().Alias)
		if err != nil || o.Topology != topology || l.Type() != "tuntap" {
			continue
		}
		out = append(out, substrate.Object{Kind: "tap", ExternalID: l.Attrs().Name, Owner: o})
	}
	return out, nil
}

// ConfigureGuestNetwork starts the domain if it is not running (its agent is the only way in),
// waits for the agent, then applies addresses, the default route and routes through
// guestagent.ConfigureNetwork (interfaces found by MAC, `ip` through guest-exec). It is
// idempotent.
func (d *Driver) ConfigureGuestNetwork(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, routes []substrate.Route) error {
	what := "configure network of domain " + node.ExternalID
	cfg, ok, err := guestNetConfig(atts, routes)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !ok {
		return nil
	}
	c, dom, err := d.lookup(ctx, node)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := d.ensureRunning(ctx, what, c, dom); err != nil {
		return err
	}
	if err := agentClient(c, dom).ConfigureNetwork(ctx, cfg); err != nil {
		return fmt.Errorf("%s (%s): %w", what, dom.Name, err)
	}
	return nil
}
