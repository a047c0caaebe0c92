package linuxnet

import (
	"errors"

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
