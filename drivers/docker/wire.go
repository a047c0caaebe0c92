package docker

// Host-side veth wiring of container NICs with netlink: the only file that creates, lists or
// deletes links. Addresses and routes go through drivers/linuxnet (ConfigureGuest), shared with
// the netns driver. The veth pair itself stays here rather than in linuxnet.CreateVeth because
// its alias also names the logical attachment (import and audit read it back) and because a
// pair left unaliased by a crash between creation and aliasing is adopted when its peer is in
// the container's namespace (see wireVeth).

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// hostIfName is the host-side veth name for owner's attachment: 14 bytes, stable per generation.
func hostIfName(o substrate.Owner, attachment string) string {
	sum := sha256.Sum256([]byte(o.Marker() + "\x00" + attachment))
	return "sd" + hex.EncodeToString(sum[:])[:12]
}

var ifNameRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_.-]{0,14}$`)

// guestIfName is the interface name inside the container: the logical attachment name when it
// is a valid interface name, else a stable derived one.
func guestIfName(attachment string) string {
	if ifNameRE.MatchString(attachment) && attachment != "lo" {
		return attachment
	}
	sum := sha256.Sum256([]byte(attachment))
	return "eth" + hex.EncodeToString(sum[:])[:8]
}

// nicAlias is the link alias on both ends of an attachment's veth: the owner marker and the
// logical attachment name.
func nicAlias(o substrate.Owner, attachment string) string { return o.Marker() + " " + attachment }

func parseNICAlias(s string) (substrate.Owner, string, bool) {
	m, att, ok := strings.Cut(s, " ")
	if !ok {
		return substrate.Owner{}, "", false
	}
	o, err := substrate.ParseMarker(m)
	if err != nil {
		return substrate.Owner{}, "", false
	}
	return o, att, true
}

// nsHandle opens a netlink handle inside pid's network namespace.
func nsHandle(pid int) (*netlink.Handle, func(), error) {
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return nil, nil, fmt.Errorf("network namespace of pid %d: %w", pid, err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		return nil, nil, fmt.Errorf("netlink in namespace of pid %d: %w", pid, err)
	}
	return h, func() { h.Close(); ns.Close() }, nil
}

type vethSpec struct {
	HostIf, GuestIf, Bridge string
	MAC                     net.HardwareAddr
	MTU                     int
	Alias                   string
}

// wireVeth creates the veth pair with its peer directly inside pid's namespace, enslaves the
// host side to the bridge and brings both ends up. A host link of the same name left by an
// earlier attempt is replaced only if it carries the same alias.
func wireVeth(pid int, v vethSpec) error {
	br, err := netlink.LinkByName(v.Bridge)
	if err != nil {
		return fmt.Errorf("bridge %s: %w: %w", v.Bridge, driver.ErrNotFound, err)
	}
	if _, ok := br.(*netlink.Bridge); !ok {
		return fmt.Errorf("network %s is a %s link, not a bridge", v.Bridge, br.Type())
	}
	ns, err := netns.GetFromPid(pid)
	if err != nil {
		return fmt.Errorf("network namespace of pid %d: %w", pid, err)
	}
	defer ns.Close()
	if old, err := netlink.LinkByName(v.HostIf); err == nil {
		// A link of this name is a leftover of an earlier attempt only if it carries this
		// attachment's alias, or — interrupted between creation and aliasing, which the kernel
		// cannot do in one step — it has no alias yet and its peer lives in this container's
		// namespace (the caller has proven the container ours). Anything else is not ours.
		if old.Attrs().Alias != v.Alias && !(old.Attrs().Alias == "" && peerIn(old, ns)) {
			return fmt.Errorf("link %s exists and is not this attachment's: %w", v.HostIf, driver.ErrNotOwned)
		}
		if err := netlink.LinkDel(old); err != nil {
			return fmt.Errorf("remove stale link %s: %w", v.HostIf, err)
		}
	}
	nh, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in namespace of pid %d: %w", pid, err)
	}
	defer nh.Close()
	if _, err := nh.LinkByName(v.GuestIf); err == nil {
		return fmt.Errorf("container already has an interface %s", v.GuestIf)
	}
	mtu := v.MTU
	if mtu == 0 {
		mtu = br.Attrs().MTU
	}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: v.HostIf, MTU: mtu, MasterIndex: br.Attrs().Index},
		PeerName:         v.GuestIf,
		PeerHardwareAddr: v.MAC,
		PeerNamespace:    netlink.NsFd(int(ns)),
	}
	if err := netlink.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth %s/%s: %w", v.HostIf, v.GuestIf, err)
	}
	fail := func(step string, err error) error {
		if l, lerr := netlink.LinkByName(v.HostIf); lerr == nil {
			_ = netlink.LinkDel(l)
		}
		return fmt.Errorf("veth %s/%s: %s: %w", v.HostIf, v.GuestIf, step, err)
	}
	host, err := netlink.LinkByName(v.HostIf)
	if err != nil {
		return fail("find host side", err)
	}
	if err := netlink.LinkSetAlias(host, v.Alias); err != nil {
		return fail("alias host side", err)
	}
	peer, err := nh.LinkByName(v.GuestIf)
	if err != nil {
		return fail("find container side", err)
	}
	if err := nh.LinkSetAlias(peer, v.Alias); err != nil {
		return fail("alias container side", err)
	}
	if lo, err := nh.LinkByName("lo"); err == nil {
		_ = nh.LinkSetUp(lo)
	}
	if err := nh.LinkSetUp(peer); err != nil {
		return fail("up container side", err)
	}
	if err := netlink.LinkSetUp(host); err != nil {
		return fail("up host side", err)
	}
	return nil
}

// peerIn reports whether host link l is a veth whose peer is inside namespace ns.
func peerIn(l netlink.Link, ns netns.NsHandle) bool {
	if _, ok := l.(*netlink.Veth); !ok {
		return false
	}
	id, err := netlink.GetNetNsIdByFd(int(ns))
	return err == nil && id >= 0 && l.Attrs().NetNsID == id
}

// deleteHostLink removes the host side (and so the pair) if it carries alias; a missing link is
// not an error, another alias is ErrNotOwned.
func deleteHostLink(hostIf, alias string) error {
	l, err := netlink.LinkByName(hostIf)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("link %s: %w", hostIf, err)
	}
	if l.Attrs().Alias != alias {
		return fmt.Errorf("link %s carries alias %q, not this attachment's marker: %w", hostIf, l.Attrs().Alias, driver.ErrNotOwned)
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete link %s: %w", hostIf, err)
	}
	return nil
}

// deleteHostLinkIfMarked removes the host side (and so the pair) if it carries alias; a missing
// link, or one carrying another alias (not provably this NIC), is left as it is.
func deleteHostLinkIfMarked(hostIf, alias string) error {
	err := deleteHostLink(hostIf, alias)
	if errors.Is(err, driver.ErrNotOwned) {
		return nil
	}
	return err
}

// markedLink is a link whose alias is a sysbox NIC alias.
type markedLink struct {
	Name       string
	Attachment string
	Owner      substrate.Owner
	MAC        string
	IPv4       []string
	Gateway    string
	Up         bool
	hostIf     string
	hostIssue  string // guest side only: what is wrong with the host side ("" when fine)
}

func (m markedLink) hostSideProblem() string { return m.hostIssue }

func (m markedLink) attachmentState() substrate.AttachmentState {
	return substrate.AttachmentState{Name: m.Attachment, MAC: m.MAC, IPv4: m.IPv4, Gateway: m.Gateway,
		Private: nicEnvelope(nicPrivate{HostIf: m.hostIf, GuestIf: m.Name, Marker: m.Owner.Marker()})}
}

func markedLinks(h *netlink.Handle) ([]markedLink, error) {
	links, err := retryDump(h.LinkList)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []markedLink
	for _, l := range links {
		a := l.Attrs()
		o, att, ok := parseNICAlias(a.Alias)
		if !ok {
			continue
		}
		out = append(out, markedLink{Name: a.Name, Attachment: att, Owner: o, MAC: a.HardwareAddr.String(),
			Up: a.Flags&net.FlagUp != 0, hostIf: hostIfName(o, att)})
	}
	return out, nil
}

// hostMarkedLinks lists sysbox NICs in the host namespace.
func hostMarkedLinks() ([]markedLink, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	defer h.Close()
	return markedLinks(h)
}

// removeHostLinksOf deletes every host-side NIC whose marker is exactly o's.
func removeHostLinksOf(o substrate.Owner) error {
	links, err := hostMarkedLinks()
	if err != nil {
		return err
	}
	for _, l := range links {
		if l.Owner.Equal(o) {
			if err := deleteHostLink(l.Name, nicAlias(l.Owner, l.Attachment)); err != nil {
				return err
			}
		}
	}
	return nil
}

// listMarkedLinks lists the sysbox NICs inside pid's namespace with their addresses, default
// gateway and the state of their host sides.
func listMarkedLinks(pid int) ([]markedLink, error) {
	nh, closeNS, err := nsHandle(pid)
	if err != nil {
		return nil, err
	}
	defer closeNS()
	out, err := markedLinks(nh)
	if err != nil {
		return nil, err
	}
	routes, _ := retryDump(func() ([]netlink.Route, error) { return nh.RouteList(nil, netlink.FAMILY_V4) })
	for i := range out {
		l, err := nh.LinkByName(out[i].Name)
		if err != nil {
			continue
		}
		addrs, err := retryDump(func() ([]netlink.Addr, error) { return nh.AddrList(l, netlink.FAMILY_V4) })
		if err != nil {
			return nil, fmt.Errorf("addresses of %s: %w", out[i].Name, err)
		}
		for _, a := range addrs {
			out[i].IPv4 = append(out[i].IPv4, a.IPNet.String())
		}
		sort.Strings(out[i].IPv4)
		for _, r := range routes {
			if r.LinkIndex == l.Attrs().Index && (r.Dst == nil || r.Dst.String() == "0.0.0.0/0") && r.Gw != nil {
				out[i].Gateway = r.Gw.String()
			}
		}
		out[i].hostIssue = hostSideIssue(out[i].hostIf, nicAlias(out[i].Owner, out[i].Attachment))
	}
	return out, nil
}

// hostSideIssue says what is wrong with a host-side veth, or "".
func hostSideIssue(hostIf, alias string) string {
	l, err := netlink.LinkByName(hostIf)
	if err != nil {
		return "host side " + hostIf + " is missing"
	}
	a := l.Attrs()
	switch {
	case a.Alias != alias:
		return "host side " + hostIf + " carries another marker"
	case a.MasterIndex == 0:
		return "host side " + hostIf + " is not on a bridge"
	case a.Flags&net.FlagUp == 0:
		return "host side " + hostIf + " is down"
	}
	return ""
}

// guestLink returns the named link inside pid's namespace (nil when missing).
func guestLink(pid int, name string) (netlink.Link, []string, error) {
	nh, closeNS, err := nsHandle(pid)
	if err != nil {
		return nil, nil, err
	}
	defer closeNS()
	l, err := nh.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, nil, nil
		}
		return nil, nil, fmt.Errorf("interface %s: %w", name, err)
	}
	addrs, err := retryDump(func() ([]netlink.Addr, error) { return nh.AddrList(l, netlink.FAMILY_V4) })
	if err != nil {
		return nil, nil, fmt.Errorf("addresses of %s: %w", name, err)
	}
	var ips []string
	for _, a := range addrs {
		ips = append(ips, a.IPNet.String())
	}
	return l, ips, nil
}

// retryDump repeats a netlink dump that the kernel interrupted because the set changed while it
// was read (other links coming and going); a partial dump is never used.
func retryDump[T any](dump func() ([]T, error)) ([]T, error) {
	var err error
	for i := 0; i < 10; i++ {
		var out []T
		if out, err = dump(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, err
}
