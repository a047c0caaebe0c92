package netns

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// ImportNode adopts the namespace /run/netns/EXTERNAL_ID for owner. The ownership rule:
//
//   - a namespace whose loopback carries a sysbox marker is adopted only if that marker names
//     the same topology, address and type as owner (any generation); its objects are re-marked
//     with owner (generation included);
//   - a namespace with no sysbox marker and an empty loopback alias is unclaimed: the explicit
//     import command is the operator's claim, and the marker is written then;
//   - anything else (another resource's marker, a foreign alias) is refused with ErrNotOwned.
//
// Attachments are reported for node-side veths carrying the marker whose host peer carries it
// too, named after their interface name inside the node (the names Attach gives them).
func (d *Driver) ImportNode(ctx context.Context, externalID string, owner substrate.Owner) (substrate.ImportedNode, error) {
	d.ensureRuntime()
	where := fmt.Sprintf("import %s as %s", externalID, owner.Address)
	if !owner.Complete() {
		return substrate.ImportedNode{}, fmt.Errorf("%s: incomplete owner: %w", where, driver.ErrNotOwned)
	}
	if strings.ContainsAny(externalID, "/\x00") || externalID == "" || externalID == "." || externalID == ".." {
		return substrate.ImportedNode{}, fmt.Errorf("%s: not a namespace name", where)
	}
	path := d.nsPath(externalID)
	if !isNetnsMount(path) {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %s is not a mounted network namespace: %w", where, path, driver.ErrNotFound)
	}
	ns := d.ns(externalID)
	nh, err := ns.Netlink()
	if err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", where, err)
	}
	defer nh.Close()
	lo, err := nh.LinkByName("lo")
	if err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: lo: %w", where, err)
	}
	prev, perr := substrate.ParseMarker(lo.Attrs().Alias)
	switch {
	case perr == nil && !prev.SameResource(owner):
		return substrate.ImportedNode{}, fmt.Errorf("%s: namespace belongs to %s %s (topology %s): %w", where, prev.Type, prev.Address, prev.Topology, driver.ErrNotOwned)
	case perr != nil && lo.Attrs().Alias != "":
		return substrate.ImportedNode{}, fmt.Errorf("%s: loopback alias %q is not a sysbox marker; refusing to claim: %w", where, lo.Attrs().Alias, driver.ErrNotOwned)
	}
	marker := owner.Marker()
	if err := nh.LinkSetAlias(lo, marker); err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: mark: %w", where, err)
	}
	ino, err := nsInode(path)
	if err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", where, err)
	}
	out := substrate.ImportedNode{Handle: substrate.Handle{Driver: Name, ExternalID: externalID, Private: encode(private{Kind: kindNode, Netns: externalID, NsInode: ino})}}
	if out.Attachments, err = reMarkAttachments(nh, path, prev, perr == nil, marker); err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", where, err)
	}
	if out.Command, err = d.adoptSidecar(externalID, ino, marker); err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", where, err)
	}
	return out, nil
}

// reMarkAttachments moves the node-side veths in the namespace at path that carry the
// previous generation's marker prev, and whose host peer carries it too, to marker (both
// ends) and reports them as attachments. An unclaimed namespace (!claimed) has none.
func reMarkAttachments(nh *netlink.Handle, path string, prev substrate.Owner, claimed bool, marker string) ([]substrate.AttachmentState, error) {
	links, err := linuxnet.LinkList(nh)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []substrate.AttachmentState
	for _, l := range links {
		veth, ok := l.(*netlink.Veth)
		if !ok || !claimed {
			continue
		}
		if o, err := substrate.ParseMarker(l.Attrs().Alias); err != nil || !o.Equal(prev) {
			continue
		}
		host, err := netlink.LinkByIndex(veth.Attrs().ParentIndex)
		if err != nil {
			continue
		}
		if o, err := substrate.ParseMarker(host.Attrs().Alias); err != nil || !o.Equal(prev) {
			continue
		}
		br, err := netlink.LinkByIndex(host.Attrs().MasterIndex)
		if err != nil {
			continue
		}
		if err := nh.LinkSetAlias(l, marker); err != nil {
			return nil, fmt.Errorf("re-mark %s: %w", l.Attrs().Name, err)
		}
		if err := netlink.LinkSetAlias(host, marker); err != nil {
			return nil, fmt.Errorf("re-mark %s: %w", host.Attrs().Name, err)
		}
		addrs, _ := nh.AddrList(l, netlink.FAMILY_V4)
		v := linuxnet.Veth{HostName: host.Attrs().Name, NodeName: l.Attrs().Name, Bridge: br.Attrs().Name, Netns: path, MAC: l.Attrs().HardwareAddr.String()}
		for _, a := range addrs {
			v.IPv4 = append(v.IPv4, a.IPNet.String())
		}
		out = append(out, substrate.AttachmentState{Name: l.Attrs().Name, MAC: v.MAC, IPv4: v.IPv4, Private: encode(private{Kind: kindAttachment, Veth: &v})})
	}
	return out, nil
}

// adoptSidecar rewrites the namespace's sidecar under marker (starting afresh when it is
// missing or names another namespace inode) and returns the command line of its process
// when that process still runs.
func (d *Driver) adoptSidecar(externalID string, ino uint64, marker string) ([]string, error) {
	var command []string
	sc, err := d.readSidecar(externalID)
	if err != nil || sc.NsInode != ino {
		sc = sidecar{Netns: externalID, NsInode: ino}
	}
	sc.Marker = marker
	if processAlive(sc.Pid, sc.StartTime, ino) {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(sc.Pid) + "/cmdline"); err == nil {
			command = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		}
	}
	if err := d.writeSidecar(sc); err != nil {
		return nil, err
	}
	return command, nil
}
