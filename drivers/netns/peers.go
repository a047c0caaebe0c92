package netns

import (
	"fmt"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/pkg/substrate"
)

// hostPeersOf names the host-side veth ends of the node whose namespace nh opens that carry
// exactly owner's marker.
// It lists the links of the node's namespace (a handful) and looks each veth's peer up by index
// in the host namespace, instead of listing every host link (linuxnet.HostLinksOf): at 1,000
// nodes that list was the largest cost of destroy, repeated once per node. A veth's host end
// always has its peer in the namespace it was created into (CreateVeth creates the peer there),
// so this finds every host end a node can own; the marker check is the same as before, and
// anything else (a host end whose peer moved away) is still found by the residue audit.
func hostPeersOf(nh *netlink.Handle, owner substrate.Owner) ([]string, error) {
	links, err := linuxnet.LinkList(nh)
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	marker := owner.Marker()
	var out []string
	for _, l := range links {
		if l.Type() != "veth" || l.Attrs().ParentIndex == 0 {
			continue
		}
		peer, err := netlink.LinkByIndex(l.Attrs().ParentIndex)
		if err != nil {
			// The peer's index is not a host link (it lives in another namespace, or it is
			// being deleted): nothing of this node's to remove in the host namespace.
			continue
		}
		if peer.Type() == "veth" && peer.Attrs().Alias == marker {
			out = append(out, peer.Attrs().Name)
		}
	}
	return out, nil
}
