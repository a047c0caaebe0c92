package linuxnet

import (
	"fmt"
	"runtime"
	"strconv"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Netns names a network namespace by a path the kernel resolves: a bind mount such as
// /run/netns/NAME or a process's /proc/PID/ns/net.
type Netns struct {
	Path string
}

// NamedNetns is the namespace `ip netns` would call name.
func NamedNetns(name string) Netns { return Netns{Path: "/run/netns/" + name} }

// PidNetns is the namespace process pid lives in.
func PidNetns(pid int) Netns { return Netns{Path: "/proc/" + strconv.Itoa(pid) + "/ns/net"} }

func (n Netns) String() string { return n.Path }

// Open returns a handle on the namespace; the caller closes it.
func (n Netns) Open() (netns.NsHandle, error) {
	h, err := netns.GetFromPath(n.Path)
	if err != nil {
		return netns.None(), fmt.Errorf("netns %s: %w", n.Path, err)
	}
	return h, nil
}

// Netlink returns a netlink handle whose sockets live in the namespace; the caller deletes it.
func (n Netns) Netlink() (*netlink.Handle, error) {
	c, err := n.OpenConn()
	if err != nil {
		return nil, err
	}
	c.Fd.Close() // the socket stays in the namespace
	return c.NH, nil
}

// Do runs fn on an OS thread switched into the namespace. Processes fn starts (fork+exec)
// inherit the namespace. If switching back fails the thread is thrown away, never reused.
func (n Netns) Do(fn func() error) error {
	target, err := n.Open()
	if err != nil {
		return err
	}
	defer target.Close()
	return DoIn(target, fn)
}

// DoIn is Do for an open namespace handle.
func DoIn(target netns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: current: %w", err)
			return
		}
		defer orig.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("netns: enter: %w", err)
			return
		}
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			// Leave the thread locked: the runtime destroys it when this goroutine exits.
			errc <- fmt.Errorf("netns: leave: %w", err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
