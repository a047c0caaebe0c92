package linuxnet

import (
	"fmt"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NodeConn is an open network namespace: a descriptor of it and a netlink handle whose socket
// lives in it. Callers that make several requests in one namespace (a driver wiring a node) open
// it once and pass it along instead of letting each call open the path, switch a thread into
// the namespace to make a socket and switch back. Whoever opened it closes it.
type NodeConn struct {
	Fd netns.NsHandle
	NH *netlink.Handle
}

// OpenConn opens ns: its descriptor and a netlink socket in it.
func (n Netns) OpenConn() (NodeConn, error) {
	fd, err := n.Open()
	if err != nil {
		return NodeConn{}, err
	}
	nh, err := netlink.NewHandleAt(fd, unix.NETLINK_ROUTE) // one socket, not one per family
	if err != nil {
		fd.Close()
		return NodeConn{}, fmt.Errorf("netns %s: netlink: %w", n.Path, err)
	}
	return NodeConn{Fd: fd, NH: nh}, nil
}

// Close releases both. The zero NodeConn holds nothing (its Fd, 0, is not closed): a NodeConn
// is open only once NH is set, and then Fd is open or netns.None().
func (c NodeConn) Close() {
	if c.NH == nil {
		return
	}
	c.NH.Close()
	if c.Fd.IsOpen() {
		c.Fd.Close()
	}
}

// hostHandles keeps netlink handles on the host's namespace for reuse. The package-level
// functions of the netlink library make a new socket for every request (socket, bind,
// getsockname, two setsockopt, close); wiring one veth makes about six host requests. Each
// caller takes a handle of its own for the duration of one operation, so concurrent callers
// never queue on one socket (a link deletion blocks its socket for tens of milliseconds). A
// shared handle skips replies of other sequence numbers, so a handle whose request failed can
// be reused.
var hostHandles = struct {
	mu   sync.Mutex
	free []*netlink.Handle
}{}

// netlinkTimeout is the send and receive timeout of the library's own per-request sockets.
const netlinkTimeout = 60 * time.Second

// hostHandleMax bounds the handles kept idle (more than the executor's default parallelism).
const hostHandleMax = 32

// hostNetlink returns a netlink handle on the host's network namespace, to be given back with
// putHostNetlink. It is made on the calling goroutine's thread, which is in the host's network
// namespace: threads switched into a node's namespace stay locked to their goroutine until they
// are switched back, and no function of this package is called from inside Do.
func hostNetlink() (*netlink.Handle, error) {
	hostHandles.mu.Lock()
	if n := len(hostHandles.free); n > 0 {
		h := hostHandles.free[n-1]
		hostHandles.free = hostHandles.free[:n-1]
		hostHandles.mu.Unlock()
		return h, nil
	}
	hostHandles.mu.Unlock()
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	if err := h.SetSocketTimeout(netlinkTimeout); err != nil {
		h.Close()
		return nil, fmt.Errorf("netlink: %w", err)
	}
	return h, nil
}

// putHostNetlink gives back a handle of hostNetlink: kept for reuse, or closed beyond
// hostHandleMax.
func putHostNetlink(h *netlink.Handle) {
	hostHandles.mu.Lock()
	defer hostHandles.mu.Unlock()
	if len(hostHandles.free) >= hostHandleMax {
		h.Close()
		return
	}
	hostHandles.free = append(hostHandles.free, h)
}
