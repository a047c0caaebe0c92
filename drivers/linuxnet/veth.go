package linuxnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// VethSpec wires one node interface: a veth pair whose host side is enslaved to Bridge and whose
// peer is created directly inside Netns as NodeName, with MAC, IPv4 prefixes and MTU set and
// the owner marker in both ends' aliases.
type VethSpec struct {
	HostName string           // host-side name (≤ 15 bytes), unique in the host namespace
	Bridge   string           // host bridge to enslave the host side to
	Netns    Netns            // the node's network namespace (by path or pid)
	NodeName string           // the interface name inside Netns
	MAC      net.HardwareAddr // node-side MAC; nil lets the kernel choose
	IPv4     []string         // prefixes set on the node side, "198.51.100.10/24"
	MTU      int              // 0: the bridge's MTU
	Owner    substrate.Owner  // the node's anchors
	// IntentDir, when set, holds intent records that let a re-run adopt (replace) a pair created
	// by a process killed before it could mark it (see intent.go).
	IntentDir string
	// Conn, when set, is Netns already open (it must be the namespace at Netns.Path); else
	// CreateVeth opens it for the call.
	Conn *NodeConn
}

// Veth is a wired pair as created; drivers keep it in their private attachment envelope.
type Veth struct {
	HostName string   `json:"host_name"`
	NodeName string   `json:"node_name"`
	Bridge   string   `json:"bridge"`
	Netns    string   `json:"netns"`
	MAC      string   `json:"mac"`
	IPv4     []string `json:"ipv4,omitempty"`
}

// CreateVeth creates the pair. A host-side link with the same name that carries exactly
// spec.Owner's marker is a leftover of an interrupted attempt and is replaced; one without it is
// refused (driver.ErrNotOwned). On failure nothing created here is left behind.
func CreateVeth(ctx context.Context, spec VethSpec) (Veth, error) {
	where := "veth " + spec.HostName
	prefixes, err := vethPrefixes(spec, where)
	if err != nil {
		return Veth{}, err
	}
	host, err := hostNetlink()
	if err != nil {
		return Veth{}, fmt.Errorf("%s: %w", where, err)
	}
	defer putHostNetlink(host)
	br, err := host.LinkByName(spec.Bridge)
	if err != nil {
		return Veth{}, fmt.Errorf("%s: bridge %s: %w", where, spec.Bridge, err)
	}
	if br.Type() != "bridge" {
		return Veth{}, fmt.Errorf("%s: %s is a %s, not a bridge", where, spec.Bridge, br.Type())
	}
	if err := removeLeftoverHostSide(host, spec, where); err != nil {
		return Veth{}, err
	}
	conn := spec.Conn
	if conn == nil {
		c, err := spec.Netns.OpenConn()
		if err != nil {
			return Veth{}, fmt.Errorf("%s: %w", where, err)
		}
		defer c.Close()
		conn = &c
	}
	nh := conn.NH
	if err := removeLeftoverNodeSide(nh, spec, where); err != nil {
		return Veth{}, err
	}
	mtu := spec.MTU
	if mtu == 0 {
		mtu = br.Attrs().MTU
	}
	v := &netlink.Veth{
		// Down until IPv6 is off on it (wireVeth).
		LinkAttrs:        netlink.LinkAttrs{Name: spec.HostName, MTU: mtu, TxQLen: -1},
		PeerName:         spec.NodeName,
		PeerHardwareAddr: spec.MAC,
		PeerNamespace:    netlink.NsFd(int(conn.Fd)),
		PeerMTU:          uint32(mtu),
	}
	if err := writeIntent(spec.IntentDir, spec.HostName, spec.Owner); err != nil {
		return Veth{}, fmt.Errorf("%s: %w", where, err)
	}
	if err := host.LinkAdd(v); err != nil {
		clearIntent(spec.IntentDir, spec.HostName)
		if errors.Is(err, unix.EEXIST) {
			return Veth{}, fmt.Errorf("%s: create: name taken in host or node namespace: %w", where, err)
		}
		return Veth{}, fmt.Errorf("%s: create: %w", where, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = host.LinkDel(v)
		}
		clearIntent(spec.IntentDir, spec.HostName)
	}()
	peer, err := wireVeth(host, nh, v, br, spec, prefixes, where)
	if err != nil {
		return Veth{}, err
	}
	ok = true
	return Veth{
		HostName: spec.HostName, NodeName: spec.NodeName, Bridge: spec.Bridge, Netns: spec.Netns.Path,
		MAC: peer.Attrs().HardwareAddr.String(), IPv4: append([]string(nil), spec.IPv4...),
	}, nil
}

// vethPrefixes checks the names and owner of spec and parses its node-side addresses.
func vethPrefixes(spec VethSpec, where string) ([]*netlink.Addr, error) {
	if !ValidIfName(spec.HostName) || !ValidIfName(spec.NodeName) {
		return nil, fmt.Errorf("%s: invalid interface names %q/%q", where, spec.HostName, spec.NodeName)
	}
	if !spec.Owner.Complete() {
		return nil, fmt.Errorf("%s: incomplete owner %+v", where, spec.Owner)
	}
	var prefixes []*netlink.Addr
	for _, p := range spec.IPv4 {
		n, err := ParseIPv4Prefix(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		prefixes = append(prefixes, &netlink.Addr{IPNet: n})
	}
	return prefixes, nil
}

// removeLeftoverHostSide deletes a host-side link named spec.HostName that spec.Owner owns
// (or that an interrupted create of spec.Owner left unmarked); another's is refused.
func removeLeftoverHostSide(host *netlink.Handle, spec VethSpec, where string) error {
	old, err := host.LinkByName(spec.HostName)
	if err != nil {
		if !isNotFound(err) {
			return fmt.Errorf("%s: %w", where, err)
		}
		return nil
	}
	if !adoptUnmarked(spec.IntentDir, "veth", spec.HostName, old.Attrs().Alias, spec.Owner) {
		if err := checkOwned("veth", old, spec.Owner); err != nil {
			return err
		}
	}
	if err := host.LinkDel(old); err != nil && !isNotFound(err) {
		return fmt.Errorf("%s: remove leftover: %w", where, err)
	}
	return nil
}

// removeLeftoverNodeSide deletes an interface named spec.NodeName in the node's namespace
// that spec.Owner owns; another's is refused.
func removeLeftoverNodeSide(nh *netlink.Handle, spec VethSpec, where string) error {
	old, err := nh.LinkByName(spec.NodeName)
	if err != nil {
		return nil // none (or unreadable: creating the pair then fails on the taken name)
	}
	if err := checkOwned("interface "+spec.NodeName+" in "+spec.Netns.Path+":", old, spec.Owner); err != nil {
		return err
	}
	if err := nh.LinkDel(old); err != nil && !isNotFound(err) {
		return fmt.Errorf("%s: remove leftover node side %s: %w", where, spec.NodeName, err)
	}
	return nil
}

// wireVeth marks the new pair on both sides, turns IPv6 off on the host side, enslaves it to br
// and brings it up, and addresses and brings up the node side, which it returns.
func wireVeth(host, nh *netlink.Handle, v *netlink.Veth, br netlink.Link, spec VethSpec, prefixes []*netlink.Addr, where string) (netlink.Link, error) {
	marker := spec.Owner.Marker()
	if err := host.LinkSetAlias(v, marker); err != nil { // ignored on creation by the kernel
		return nil, fmt.Errorf("%s: mark: %w", where, err)
	}
	disablePortIPv6(spec.HostName)
	if err := host.LinkSetMasterByIndex(v, br.Attrs().Index); err != nil {
		return nil, fmt.Errorf("%s: enslave to %s: %w", where, spec.Bridge, err)
	}
	if err := host.LinkSetUp(v); err != nil {
		return nil, fmt.Errorf("%s: up: %w", where, err)
	}
	peer, err := nh.LinkByName(spec.NodeName)
	if err != nil {
		return nil, fmt.Errorf("%s: node side %s: %w", where, spec.NodeName, err)
	}
	if err := nh.LinkSetAlias(peer, marker); err != nil {
		return nil, fmt.Errorf("%s: node side %s: alias: %w", where, spec.NodeName, err)
	}
	for _, a := range prefixes {
		if err := nh.AddrReplace(peer, a); err != nil {
			return nil, fmt.Errorf("%s: node side %s: address %s: %w", where, spec.NodeName, a.IPNet, err)
		}
	}
	if err := nh.LinkSetUp(peer); err != nil {
		return nil, fmt.Errorf("%s: node side %s: up: %w", where, spec.NodeName, err)
	}
	return peer, nil
}

// disablePortIPv6 turns IPv6 off on a bridge port before it comes up. A port forwards frames
// (IPv6 ones included); it needs no addresses of its own. With IPv6 on, each port adds a
// link-local address, its routes and multicast state to the host namespace, and every later
// link deletion there walks all of them: deleting a veth cost 4.1 ms of kernel time with 1,000
// ports against 1.5 ms with IPv6 off (1.9 ms at 100 ports with it on). Only a saving: where
// the setting cannot be written (no IPv6, a read-only /proc/sys) the port keeps IPv6, as
// before.
//
// The file is opened relative to a descriptor of the host's /proc/sys/net/ipv6/conf held for
// the process (portConfDir), not by its full path: the lookup of "net" under /proc/sys compares
// every namespace's "net" entry that has been looked up (one per node namespace whose sysctls
// were touched), so a full path costs O(namespaces) per port.
func disablePortIPv6(name string) {
	if dir := portConfDir(); dir >= 0 {
		// A failure here (no such port directory) would fail by the full path too.
		if fd, err := unix.Openat(dir, name+"/disable_ipv6", unix.O_WRONLY|unix.O_CLOEXEC, 0); err == nil {
			_, _ = unix.Write(fd, []byte("1\n"))
			_ = unix.Close(fd)
		}
		return
	}
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/disable_ipv6", []byte("1\n"), 0o644)
}

// portConfDir is a descriptor of the host namespace's /proc/sys/net/ipv6/conf, opened once (on
// a thread in the host's namespace, like every call of this package outside Do), or -1 when it
// cannot be opened (no IPv6). Links made later appear in it: sysctl directories are looked up
// anew on each open.
var portConfDir = sync.OnceValue(func() int {
	fd, err := unix.Open("/proc/sys/net/ipv6/conf", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return fd
})

// ObserveVeth reports a pair: Absent when the host side or the namespace is gone (a veth pair
// dies as one); Drifted when a marker, the bridge, the MAC, an address or the link state departs
// from v; Present otherwise.
func ObserveVeth(ctx context.Context, v Veth, owner substrate.Owner) (substrate.Observation, error) {
	obs := substrate.Observation{ExternalID: v.HostName, At: time.Now().UTC()}
	drift := func(format string, a ...any) (substrate.Observation, error) {
		obs.Status = substrate.Drifted
		obs.Reason = fmt.Sprintf(format, a...)
		return obs, nil
	}
	host, err := netlink.LinkByName(v.HostName)
	if isNotFound(err) {
		obs.Status = substrate.Absent
		obs.Reason = "host side " + v.HostName + " does not exist"
		return obs, nil
	}
	if err != nil {
		obs.Status = substrate.Unknown
		return obs, fmt.Errorf("veth %s: %w: %w", v.HostName, driver.ErrUnavailable, err)
	}
	if o, err := substrate.ParseMarker(host.Attrs().Alias); err == nil {
		obs.Owner = &o
	}
	if obs.Owner == nil || !obs.Owner.Equal(owner) {
		return drift("host side %s lacks this node's ownership marker", v.HostName)
	}
	br, err := netlink.LinkByName(v.Bridge)
	if err != nil || host.Attrs().MasterIndex != br.Attrs().Index {
		return drift("host side %s is not enslaved to bridge %s", v.HostName, v.Bridge)
	}
	if host.Attrs().Flags&net.FlagUp == 0 {
		return drift("host side %s is down", v.HostName)
	}
	nsh, err := Netns{Path: v.Netns}.Netlink()
	if err != nil {
		obs.Status = substrate.Absent
		obs.Reason = "namespace " + v.Netns + " is gone"
		return obs, nil
	}
	defer nsh.Close()
	peer, err := nsh.LinkByName(v.NodeName)
	if err != nil {
		return drift("node side %s is missing in %s", v.NodeName, v.Netns)
	}
	if !sameMAC(peer.Attrs().HardwareAddr.String(), v.MAC) {
		return drift("node side %s has MAC %s, want %s", v.NodeName, peer.Attrs().HardwareAddr, v.MAC)
	}
	if peer.Attrs().Flags&net.FlagUp == 0 {
		return drift("node side %s is down", v.NodeName)
	}
	addrs, err := nsh.AddrList(peer, netlink.FAMILY_V4)
	if err != nil {
		obs.Status = substrate.Unknown
		return obs, fmt.Errorf("veth %s: addresses: %w: %w", v.HostName, driver.ErrUnavailable, err)
	}
	var have []string
	for _, a := range addrs {
		have = append(have, a.IPNet.String())
	}
	for _, want := range v.IPv4 {
		n, err := ParseIPv4Prefix(want)
		if err != nil || !slices.Contains(have, n.String()) {
			return drift("node side %s lacks address %s (has %v)", v.NodeName, want, have)
		}
	}
	obs.Status = substrate.Present
	obs.Attributes = map[string]string{"mac": v.MAC, "host_ifname": v.HostName}
	return obs, nil
}

// DeleteVeth removes the pair after checking the host side's marker; a missing pair is fine.
func DeleteVeth(ctx context.Context, hostName string, owner substrate.Owner) error {
	return DeleteVethWithIntents(ctx, hostName, owner, "")
}

// DeleteVethWithIntents is DeleteVeth for callers that create with VethSpec.IntentDir: an
// unmarked pair that an intent of exactly owner names is deleted too, and the intent removed.
func DeleteVethWithIntents(ctx context.Context, hostName string, owner substrate.Owner, intentDir string) error {
	link, err := netlink.LinkByName(hostName)
	if isNotFound(err) {
		clearIntent(intentDir, hostName)
		return nil
	}
	if err != nil {
		return fmt.Errorf("veth %s: %w: %w", hostName, driver.ErrUnavailable, err)
	}
	if !adoptUnmarked(intentDir, "veth", hostName, link.Attrs().Alias, owner) {
		if err := checkOwned("veth", link, owner); err != nil {
			return err
		}
	}
	if err := netlink.LinkDel(link); err != nil && !isNotFound(err) {
		return fmt.Errorf("veth %s: delete: %w", hostName, err)
	}
	clearIntent(intentDir, hostName)
	return nil
}

// QuiesceVeth takes a pair off the network without deleting it (reset: the next generation
// takes over the same MAC and addresses): the host side leaves its bridge and goes down.
func QuiesceVeth(ctx context.Context, hostName string, owner substrate.Owner) error {
	link, err := netlink.LinkByName(hostName)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("veth %s: %w: %w", hostName, driver.ErrUnavailable, err)
	}
	if err := checkOwned("veth", link, owner); err != nil {
		return err
	}
	if err := netlink.LinkSetDown(link); err != nil {
		return fmt.Errorf("veth %s: down: %w", hostName, err)
	}
	if err := netlink.LinkSetNoMaster(link); err != nil {
		return fmt.Errorf("veth %s: leave bridge: %w", hostName, err)
	}
	return nil
}

// HostLinksOf lists host-namespace links whose alias carries exactly owner's marker.
func HostLinksOf(owner substrate.Owner) ([]string, error) {
	links, err := LinkList(nil)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	marker := owner.Marker()
	var out []string
	for _, l := range links {
		if l.Attrs().Alias == marker {
			out = append(out, l.Attrs().Name)
		}
	}
	return out, nil
}

// HostResidue lists host-namespace links and forward-accept rules that carry a marker of the
// given topology.
func HostResidue(ctx context.Context, topology string) ([]substrate.Object, error) {
	links, err := LinkList(nil)
	if err != nil {
		return nil, fmt.Errorf("list links: %w: %w", driver.ErrUnavailable, err)
	}
	var out []substrate.Object
	for _, l := range links {
		o, err := substrate.ParseMarker(l.Attrs().Alias)
		if err != nil || o.Topology != topology {
			continue
		}
		out = append(out, substrate.Object{Kind: l.Type(), ExternalID: l.Attrs().Name, Owner: o})
	}
	rules, err := ForwardRules()
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		if r.Owner.Topology == topology {
			out = append(out, substrate.Object{Kind: "nft-rule", ExternalID: fmt.Sprintf("ip filter FORWARD handle %d", r.Handle), Owner: r.Owner})
		}
	}
	return out, nil
}

// GuestInterface is one wired interface as the guest-network step sees it.
type GuestInterface struct {
	Name    string
	IPv4    []string
	Gateway string
	// Wired says that the caller's own process set exactly IPv4 on the interface and brought it
	// up (CreateVeth, moments before): only its gateway is left to configure.
	Wired bool
}

// ConfigureGuest sets up networking inside ns after wiring: loopback up, every interface's
// addresses present and link up, then routes; the first interface gateway becomes the default
// route unless routes name 0.0.0.0/0 themselves. It is idempotent.
func ConfigureGuest(ctx context.Context, ns Netns, ifaces []GuestInterface, routes []substrate.Route) error {
	nh, err := ns.Netlink()
	if err != nil {
		return err
	}
	defer nh.Close()
	return ConfigureGuestVia(ctx, nh, ns, false, ifaces, routes)
}

// ConfigureGuestVia is ConfigureGuest through nh, an open handle on ns. loUp says that the
// caller's process brought ns's loopback up itself (when it made the namespace); interfaces
// marked Wired keep the addresses and link state the caller's process just gave them.
func ConfigureGuestVia(ctx context.Context, nh *netlink.Handle, ns Netns, loUp bool, ifaces []GuestInterface, routes []substrate.Route) error {
	if !loUp {
		if lo, err := nh.LinkByName("lo"); err == nil {
			if err := nh.LinkSetUp(lo); err != nil {
				return fmt.Errorf("netns %s: lo up: %w", ns, err)
			}
		}
	}
	for _, ifc := range ifaces {
		if ifc.Wired {
			continue
		}
		l, err := nh.LinkByName(ifc.Name)
		if err != nil {
			return fmt.Errorf("netns %s: interface %s: %w", ns, ifc.Name, err)
		}
		for _, p := range ifc.IPv4 {
			n, err := ParseIPv4Prefix(p)
			if err != nil {
				return fmt.Errorf("netns %s: interface %s: %w", ns, ifc.Name, err)
			}
			if err := nh.AddrReplace(l, &netlink.Addr{IPNet: n}); err != nil {
				return fmt.Errorf("netns %s: interface %s: address %s: %w", ns, ifc.Name, p, err)
			}
		}
		if err := nh.LinkSetUp(l); err != nil {
			return fmt.Errorf("netns %s: interface %s: up: %w", ns, ifc.Name, err)
		}
	}
	all := append([]substrate.Route(nil), routes...)
	hasDefault := slices.ContainsFunc(all, func(r substrate.Route) bool { return r.To == "0.0.0.0/0" || r.To == "default" })
	if !hasDefault {
		for _, ifc := range ifaces {
			if ifc.Gateway != "" {
				all = append(all, substrate.Route{To: "0.0.0.0/0", Via: ifc.Gateway})
				break
			}
		}
	}
	for _, r := range all {
		via, err := ParseIPv4(r.Via)
		if err != nil {
			return fmt.Errorf("netns %s: route to %s: %w", ns, r.To, err)
		}
		rt := &netlink.Route{Gw: via}
		if r.To != "0.0.0.0/0" && r.To != "default" {
			dst, err := ParseIPv4Prefix(r.To)
			if err != nil {
				return fmt.Errorf("netns %s: route: %w", ns, err)
			}
			dst.IP = dst.IP.Mask(dst.Mask)
			rt.Dst = dst
		}
		if err := nh.RouteReplace(rt); err != nil {
			return fmt.Errorf("netns %s: route to %s via %s: %w", ns, r.To, r.Via, err)
		}
	}
	return nil
}

func sameMAC(a, b string) bool {
	x, err1 := net.ParseMAC(a)
	y, err2 := net.ParseMAC(b)
	return err1 == nil && err2 == nil && x.String() == y.String()
}
