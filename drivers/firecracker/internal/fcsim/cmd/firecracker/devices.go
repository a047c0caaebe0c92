package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/firecracker/internal/fcsim"
)

// guestAgentPort is the vsock port the guest image's init gives sysbox-guest (scripts/guest-image,
// sysbox.vsock_port default); the simulated guest listens there too.
const guestAgentPort = 52

// devices is the VMM's host side from InstanceStart on: it holds every TAP open with the flags
// Firecracker's virtio-net backend uses (which also gives the TAP carrier), and serves the vsock
// uds_path the way Firecracker's host side does: a host connection sends "CONNECT <port>\n" and,
// when a guest listens on that port, gets "OK <local port>\n" and a byte stream to it. The guest
// side of the vsock is simulated by unix sockets GUESTDIR/<port>.sock (no vsock on this host).
//
// The simulated guest is a network namespace owned by the guest agent process (cmd/sysbox-guest,
// started with CLONE_NEWNET and killed when the simulator dies): one TAP per network interface
// inside it (eth0, eth1, … by iface_id, with guest_mac), and frames are pumped between each
// host TAP and its guest TAP, as virtio-net moves them between the host TAP and the guest.
type devices struct {
	id       string
	apiSock  string
	agent    string // sysbox-guest binary; "" runs no guest
	guestDir string
	// helper, when set, runs the guest (jailed: see helper.go); agent is then unused here.
	helper *guestHelper

	mu    sync.Mutex
	files []*os.File
	ln    net.Listener
	guest *exec.Cmd
	next  int
}

// newDevices finds the guest agent: FCSIM_GUEST_AGENT, else sysbox-guest beside this binary.
// FCSIM_GUEST_VSOCK_DIR overrides where guest ports listen (default: "guest" beside the API
// socket, in the node's directory).
func newDevices(id, apiSock string) *devices {
	d := &devices{id: id, apiSock: apiSock, agent: os.Getenv("FCSIM_GUEST_AGENT"), guestDir: os.Getenv("FCSIM_GUEST_VSOCK_DIR"), next: 1 << 30}
	if d.agent == "" {
		if self, err := os.Executable(); err == nil {
			if p := filepath.Join(filepath.Dir(self), "sysbox-guest"); isExecutable(p) {
				d.agent = p
			}
		}
	}
	if d.guestDir == "" {
		d.guestDir = filepath.Join(filepath.Dir(apiSock), "guest")
	}
	return d
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func (d *devices) start(nics []fcsim.NIC, udsPath string) (err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.guest != nil || d.ln != nil {
		return errors.New("devices already started")
	}
	defer func() {
		if err != nil {
			d.closeLocked()
		}
	}()
	host := make([]*os.File, 0, len(nics))
	for _, n := range nics {
		f, err := openTAP(n.HostDevName)
		if err != nil {
			return fmt.Errorf("interface %s: %w", n.IfaceID, err)
		}
		d.files = append(d.files, f)
		host = append(host, f)
	}
	switch {
	case d.helper != nil:
		if err := d.helper.call(helperMsg{Op: "start", NICs: nics}, host); err != nil {
			return err
		}
	case d.agent != "":
		if err := d.startGuest(nics, host); err != nil {
			return err
		}
	}
	if udsPath != "" {
		ln, err := net.Listen("unix", udsPath)
		if err != nil {
			return fmt.Errorf("vsock: %w", err)
		}
		d.ln = ln
		go d.serveVsock(ln)
	}
	return nil
}

// startGuest starts the agent in a new network namespace, gives that namespace one TAP per
// interface and pumps frames between them and the host TAPs.
func (d *devices) startGuest(nics []fcsim.NIC, host []*os.File) error {
	if err := os.MkdirAll(d.guestDir, 0o700); err != nil {
		return fmt.Errorf("guest: %w", err)
	}
	sock := filepath.Join(d.guestDir, strconv.Itoa(guestAgentPort)+".sock")
	_ = os.Remove(sock) // a socket of an earlier guest of this process's node
	cmd := exec.Command(d.agent, "-unix", sock)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Pdeathsig: the guest dies with the VMM, however the VMM ends (SIGKILL included).
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("guest agent %s: %w", d.agent, err)
	}
	d.guest = cmd
	go func() { _ = cmd.Wait() }()
	ns, err := netns.GetFromPid(cmd.Process.Pid)
	if err != nil {
		return fmt.Errorf("guest network namespace: %w", err)
	}
	defer ns.Close()
	for i, n := range nics {
		name := "eth" + strconv.Itoa(i)
		g, err := openTAPIn(ns, name)
		if err != nil {
			return fmt.Errorf("guest interface %s (%s): %w", name, n.IfaceID, err)
		}
		d.files = append(d.files, g)
		if err := setMAC(ns, name, n.GuestMAC); err != nil {
			return fmt.Errorf("guest interface %s (%s): %w", name, n.IfaceID, err)
		}
		go pump(host[i], g)
		go pump(g, host[i])
	}
	return nil
}

// pump copies frames (each read of a TAP is one frame, virtio-net header first: both ends use
// the same flags, so the header passes through unchanged) until either end fails.
func pump(from, to *os.File) {
	buf := make([]byte, 65536+64)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		if _, err := to.Write(buf[:n]); err != nil && !errors.Is(err, unix.EIO) {
			return // EIO: the other end is down; drop the frame as a NIC would
		}
	}
}

// openTAP attaches to an existing TAP as Firecracker does (IFF_TAP|IFF_NO_PI|IFF_VNET_HDR).
func openTAP(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	var req struct {
		name  [unix.IFNAMSIZ]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], name)
	req.flags = unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req))); errno != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", name, errno)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+name), nil
}

// openTAPIn creates a non-persistent TAP inside ns (it goes when its descriptor closes): the
// thread enters ns for the TUNSETIFF and returns to its own namespace.
func openTAPIn(ns netns.NsHandle, name string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		self, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer self.Close()
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("enter guest namespace: %w", err)}
			return
		}
		f, err := openTAP(name)
		if serr := netns.Set(self); serr != nil {
			// The thread stays locked: the runtime ends it with this goroutine rather than let
			// it run other code in the guest's namespace.
			if f != nil {
				f.Close()
			}
			ch <- result{err: fmt.Errorf("leave guest namespace: %w", serr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{f: f, err: err}
	}()
	r := <-ch
	return r.f, r.err
}

func setMAC(ns netns.NsHandle, name, mac string) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		return err
	}
	if mac != "" {
		hw, err := net.ParseMAC(mac)
		if err != nil {
			return fmt.Errorf("guest_mac %q: %w", mac, err)
		}
		if err := h.LinkSetHardwareAddr(l, hw); err != nil {
			return fmt.Errorf("set guest_mac %s: %w", mac, err)
		}
	}
	return nil
}

// pause stops or continues the guest's processes, as a paused VMM stops its vCPUs: a paused
// guest's agent does not answer.
func (d *devices) pause(paused bool) error {
	if d.helper != nil {
		return d.helper.call(helperMsg{Op: "pause", Paused: paused}, nil)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.guest == nil || d.guest.Process == nil {
		return nil
	}
	sig := syscall.SIGCONT
	if paused {
		sig = syscall.SIGSTOP
	}
	return d.guest.Process.Signal(sig)
}

func (d *devices) serveVsock(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go d.connect(c)
	}
}

// connect runs the host-initiated handshake of one connection.
func (d *devices) connect(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "CONNECT" {
		return // Firecracker drops a connection whose first line is not a CONNECT
	}
	port, err := strconv.ParseUint(f[1], 10, 32)
	if err != nil {
		return
	}
	g, err := net.DialTimeout("unix", filepath.Join(d.guestDir, strconv.FormatUint(port, 10)+".sock"), 5*time.Second)
	if err != nil {
		return // nothing listens on that guest port: the connection is reset
	}
	defer g.Close()
	d.mu.Lock()
	d.next++
	local := d.next
	d.mu.Unlock()
	if _, err := fmt.Fprintf(c, "OK %d\n", local); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(g, r); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, g); done <- struct{}{} }()
	<-done
}

func (d *devices) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closeLocked()
}

func (d *devices) closeLocked() {
	if d.helper != nil && len(d.files) > 0 {
		_ = d.helper.call(helperMsg{Op: "stop"}, nil)
	}
	if d.guest != nil && d.guest.Process != nil {
		_ = d.guest.Process.Kill()
		d.guest = nil
	}
	for _, f := range d.files {
		f.Close()
	}
	d.files = nil
	if d.ln != nil {
		d.ln.Close()
		d.ln = nil
	}
}

// probeTAP reports whether the TAP name exists and this process may attach to it.
func probeTAP(name string) bool {
	f, err := openTAP(name)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
