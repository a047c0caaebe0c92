package linuxnet

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// LinkList lists links through h (nil: the host namespace), retrying a dump the kernel
// interrupted because links changed meanwhile (netlink.ErrDumpInterrupted): a partial list
// must never be taken as the truth (an audit would miss residue).
func LinkList(h *netlink.Handle) ([]netlink.Link, error) {
	var (
		links []netlink.Link
		err   error
	)
	for range 20 {
		if h == nil {
			links, err = netlink.LinkList()
		} else {
			links, err = h.LinkList()
		}
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return links, err
		}
	}
	return nil, err
}

// Links lists the links inside n through a netlink socket opened there for the call.
func (n Netns) Links() ([]netlink.Link, error) {
	nh, err := n.Netlink()
	if err != nil {
		return nil, err
	}
	defer nh.Close()
	links, err := LinkList(nh)
	if err != nil {
		return nil, fmt.Errorf("netns %s: list links: %w", n, err)
	}
	return links, nil
}
