package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/guestvm"
	"zyvor.dev/sysbox/internal/feature"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TAPName is the TAP of owner's attachment: "sbf" and a hash over (owner, attachment,
// generation), so a new generation's TAP never collides with the prior one's.
func TAPName(o substrate.Owner, attachment string) string {
	return linuxnet.IfName("sbf", o.ShortID(16), attachment, strconv.FormatUint(o.Generation, 10))
}

// ifaceID maps an attachment name onto Firecracker's id alphabet (letters, digits, '_').
func ifaceID(attachment string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, attachment)
}

func sortedNICs(m map[string]nicRecord) []nicRecord {
	var out []nicRecord
	for _, n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].IfaceID < out[j].IfaceID })
	return out
}

// taps lists every TAP the record knows, wired or pending.
func (r nodeRecord) taps() []string {
	var out []string
	for _, n := range sortedNICs(r.NICs) {
		out = append(out, n.TAP)
	}
	for _, p := range r.PendingTAPs {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func (r nodeRecord) pending(tap string) bool { return slices.Contains(r.PendingTAPs, tap) }

// Attach creates the attachment's TAP (marked with the node owner, enslaved to the network's
// bridge, up) and configures it as the VMM's network interface with the declared MAC as
// guest_mac. Firecracker has no NIC hotplug: a guest that already booted is refused.
func (d *Driver) Attach(ctx context.Context, node substrate.Handle, spec substrate.AttachmentSpec) (substrate.AttachmentState, error) {
	o := spec.Owner
	what := fmt.Sprintf("firecracker node %s: attachment %s", spec.Node, spec.Name)
	mac := linuxnet.DefaultMAC(spec.Node, spec.Name)
	if spec.MAC != "" {
		m, err := linuxnet.ParseMAC(spec.MAC)
		if err != nil || m == nil {
			return substrate.AttachmentState{}, fmt.Errorf("%s: mac %q: %v: %w", what, spec.MAC, err, driver.ErrInvalid)
		}
		mac = m
	}
	bridge := spec.Network.ExternalID
	if !linuxnet.ValidIfName(bridge) {
		return substrate.AttachmentState{}, fmt.Errorf("%s: network handle names no bridge (%q): %w", what, bridge, driver.ErrInvalid)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.owned(node.ExternalID, o)
	if err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", what, err)
	}
	if !isOurVMM(r.PID, r.StartTime, r.Socket) {
		return substrate.AttachmentState{}, fmt.Errorf("%s: the VMM process is not running; create the node again: %w", what, driver.ErrUnavailable)
	}
	info, err := d.describe(ctx, r)
	if err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", what, err)
	}
	n := nicRecord{IfaceID: ifaceID(spec.Name), TAP: TAPName(o, spec.Name), Bridge: bridge, MAC: mac.String()}
	if info.State != StateNotStarted {
		if prev, ok := r.NICs[spec.Name]; ok && prev == n {
			return nicState(spec, n, o), nil // wired before boot: a retried attach converges
		}
		return substrate.AttachmentState{}, fmt.Errorf("%s: the guest is %s and Firecracker has no NIC hotplug (network interfaces are pre-boot only): %w",
			what, info.State, &feature.NotSupportedError{Feature: "firecracker NIC hotplug", Reason: "attach before StartNode or reset the node"})
	}
	for name, other := range r.NICs {
		if name != spec.Name && strings.EqualFold(other.MAC, n.MAC) {
			return substrate.AttachmentState{}, fmt.Errorf("%s: mac %s already used by attachment %s: %w", what, n.MAC, name, driver.ErrInvalid)
		}
	}
	// The intent covers only a name that is free now: an unmarked link already holding it is
	// someone else's and is never adopted.
	if l, err := netlink.LinkByName(n.TAP); err == nil && l.Attrs().Alias == "" && !r.pending(n.TAP) {
		return substrate.AttachmentState{}, fmt.Errorf("%s: an unmarked %s already holds the TAP name %s: %w", what, l.Type(), n.TAP, driver.ErrNotOwned)
	}
	if !r.pending(n.TAP) {
		r.PendingTAPs = append(r.PendingTAPs, n.TAP)
		if err := d.writeRecord(r); err != nil {
			return substrate.AttachmentState{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := ensureTAP(n.TAP, bridge, spec.MTU, o, r.owner()); err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", what, err)
	}
	if r.NICs == nil {
		r.NICs = map[string]nicRecord{}
	}
	r.NICs[spec.Name] = n
	r.PendingTAPs = slices.DeleteFunc(r.PendingTAPs, func(s string) bool { return s == n.TAP })
	if err := d.writeRecord(r); err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", what, err)
	}
	if r.Restore != nil {
		// The snapshot brings the interface; the load points it at this TAP (network_overrides).
		return nicState(spec, n, o), nil
	}
	c, err := NewClient(r.Socket)
	if err != nil {
		return substrate.AttachmentState{}, err
	}
	defer c.Close()
	if err := c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: n.IfaceID, HostDevName: n.TAP, GuestMAC: n.MAC, MTU: spec.MTU}); err != nil {
		return substrate.AttachmentState{}, fmt.Errorf("%s: %w", what, err)
	}
	return nicState(spec, n, o), nil
}

func nicState(spec substrate.AttachmentSpec, n nicRecord, o substrate.Owner) substrate.AttachmentState {
	data, _ := json.Marshal(nicPrivate{TAP: n.TAP, Bridge: n.Bridge, IfaceID: n.IfaceID, Marker: o.Marker()})
	return substrate.AttachmentState{Name: spec.Name, MAC: n.MAC, IPv4: spec.IPv4, Gateway: spec.Gateway,
		Private: substrate.Envelope{Driver: Name, Version: nicPrivateVersion, Data: data}}
}

// ObserveAttachment: Absent without the TAP; Drifted when the TAP carries another marker or left
// its bridge; Present otherwise.
func (d *Driver) ObserveAttachment(_ context.Context, _ substrate.Handle, st substrate.AttachmentState, o substrate.Owner) (substrate.Observation, error) {
	obs := substrate.Observation{Status: substrate.Unknown}
	p, err := decodeNIC(st.Private)
	if err != nil {
		return obs, err
	}
	obs.ExternalID = p.TAP
	link, err := netlink.LinkByName(p.TAP)
	if isLinkNotFound(err) {
		obs.Status, obs.Reason = substrate.Absent, "no TAP "+p.TAP
		return obs, nil
	}
	if err != nil {
		obs.Reason = err.Error()
		return obs, fmt.Errorf("tap %s: %v: %w", p.TAP, err, driver.ErrUnavailable)
	}
	if found, err := substrate.ParseMarker(link.Attrs().Alias); err == nil {
		obs.Owner = &found
	}
	if err := checkTAP(link, o); err != nil {
		obs.Status, obs.Reason = substrate.Drifted, err.Error()
		return obs, nil
	}
	if br, err := netlink.LinkByName(p.Bridge); err != nil || link.Attrs().MasterIndex != br.Attrs().Index {
		obs.Status, obs.Reason = substrate.Drifted, "tap "+p.TAP+" is not a port of bridge "+p.Bridge
		return obs, nil
	}
	obs.Status = substrate.Present
	return obs, nil
}

// Detach deletes the attachment's TAP after checking its marker. A booted guest keeps its
// virtio-net device (no hotplug) with no backend behind it.
func (d *Driver) Detach(_ context.Context, node substrate.Handle, st substrate.AttachmentState, o substrate.Owner) error {
	p, err := decodeNIC(st.Private)
	if err != nil {
		return err
	}
	if err := deleteTAP(p.TAP, o, false); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if r, err := d.owned(node.ExternalID, o); err == nil {
		delete(r.NICs, st.Name)
		return d.writeRecord(r)
	}
	return nil
}

// ConfigureGuestNetwork records the guest network (every IPv4 address of every attachment on
// the NIC with its MAC, the default route, other routes) in the node's record, so that every
// boot of this generation applies it through the guest agent (StartNode), and applies it now
// when the guest is already running. It is idempotent.
func (d *Driver) ConfigureGuestNetwork(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, routes []substrate.Route) error {
	what := "firecracker node " + node.ExternalID + ": guest network"
	cfg, err := guestvm.NetworkConfig(atts, routes) // nil: nothing to configure
	if err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, driver.ErrInvalid)
	}
	d.mu.Lock()
	r, err := d.lookup(node.ExternalID)
	if err == nil && !reflect.DeepEqual(r.Network, cfg) {
		r.Network = cfg
		err = d.writeRecord(r)
	}
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !isOurVMM(r.PID, r.StartTime, r.Socket) {
		return nil // StartNode boots a fresh process and applies the record
	}
	info, err := d.describe(ctx, r)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if info.State != StateRunning {
		return nil // StartNode applies it once the guest runs
	}
	if err := d.applyNetwork(ctx, r, cfg); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// TAP devices.

func isLinkNotFound(err error) bool {
	if err == nil {
		return false
	}
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// checkTAP proves link is a TAP carrying exactly o's marker.
func checkTAP(link netlink.Link, o substrate.Owner) error {
	name := link.Attrs().Name
	if _, ok := link.(*netlink.Tuntap); !ok {
		return fmt.Errorf("tap %s: is a %s, not a TAP: %w", name, link.Type(), driver.ErrNotOwned)
	}
	found, err := substrate.ParseMarker(link.Attrs().Alias)
	if err != nil || !o.Complete() || !found.Equal(o) {
		return fmt.Errorf("tap %s: marker %q is not %s generation %d's: %w", name, link.Attrs().Alias, o.Address, o.Generation, driver.ErrNotOwned)
	}
	return nil
}

// ensureTAP creates name as a persistent TAP (no packet info, vnet header: what Firecracker
// opens) or adopts it when it carries o's marker, or is unmarked and recorded as pending (the
// intent written before creation); then marks it, enslaves it to bridge and sets it up. Any
// other link of that name is refused and left alone. A jailed node's TAP belongs to its VMM's
// uid:gid (own), the only unprivileged user that may attach to it; otherwise to root.
func ensureTAP(name, bridge string, mtu int, o substrate.Owner, own fileOwner) error {
	br, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w", bridge, err)
	}
	if br.Type() != "bridge" {
		return fmt.Errorf("bridge %s: is a %s: %w", bridge, br.Type(), driver.ErrInvalid)
	}
	link, err := netlink.LinkByName(name)
	switch {
	case isLinkNotFound(err):
		la := netlink.NewLinkAttrs()
		la.Name = name
		t := &netlink.Tuntap{LinkAttrs: la, Mode: netlink.TUNTAP_MODE_TAP,
			Flags: netlink.TUNTAP_NO_PI | netlink.TUNTAP_VNET_HDR | netlink.TUNTAP_ONE_QUEUE | unix.IFF_TUN_EXCL}
		if own.set {
			t.Owner, t.Group = uint32(own.uid), uint32(own.gid)
		}
		if err := netlink.LinkAdd(t); err != nil {
			return fmt.Errorf("tap %s: create: %w", name, err)
		}
		for _, f := range t.Fds {
			f.Close()
		}
		if link, err = netlink.LinkByName(name); err != nil {
			return fmt.Errorf("tap %s: %w", name, err)
		}
	case err != nil:
		return fmt.Errorf("tap %s: %w", name, err)
	case link.Attrs().Alias == "":
		// Unmarked: ours only through the pending intent, which the caller wrote before creating.
		if _, ok := link.(*netlink.Tuntap); !ok {
			return fmt.Errorf("tap %s: an unmarked %s holds the name: %w", name, link.Type(), driver.ErrNotOwned)
		}
	default:
		if err := checkTAP(link, o); err != nil {
			return err
		}
	}
	if err := netlink.LinkSetAlias(link, o.Marker()); err != nil {
		return fmt.Errorf("tap %s: mark: %w", name, err)
	}
	if mtu > 0 {
		if err := netlink.LinkSetMTU(link, mtu); err != nil {
			return fmt.Errorf("tap %s: mtu %d: %w", name, mtu, err)
		}
	}
	if err := netlink.LinkSetMaster(link, br); err != nil {
		return fmt.Errorf("tap %s: enslave to %s: %w", name, bridge, err)
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("tap %s: up: %w", name, err)
	}
	return nil
}

// deleteTAP removes name when it carries o's marker (or, with pendingOK, is an unmarked TAP
// this node recorded as about to be created). Gone is fine; anything else is ErrNotOwned.
func deleteTAP(name string, o substrate.Owner, pendingOK bool) error {
	link, err := netlink.LinkByName(name)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tap %s: %v: %w", name, err, driver.ErrUnavailable)
	}
	_, isTap := link.(*netlink.Tuntap)
	if !(pendingOK && isTap && link.Attrs().Alias == "") {
		if err := checkTAP(link, o); err != nil {
			return err
		}
	}
	if err := netlink.LinkDel(link); err != nil && !isLinkNotFound(err) {
		return fmt.Errorf("tap %s: delete: %w", name, err)
	}
	return nil
}

// setTAPDown takes an owned TAP down (quiesce before a new generation takes its MAC and IP).
func setTAPDown(name string, o substrate.Owner) error {
	link, err := netlink.LinkByName(name)
	if isLinkNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tap %s: %w", name, err)
	}
	if link.Attrs().Alias == "" {
		return nil // a pending TAP never wired to the guest
	}
	if err := checkTAP(link, o); err != nil {
		return err
	}
	return netlink.LinkSetDown(link)
}
