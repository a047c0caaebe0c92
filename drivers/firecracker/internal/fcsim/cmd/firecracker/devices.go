package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// devices is the VMM's host side from InstanceStart on: it holds every TAP open with the flags
// Firecracker's virtio-net backend uses (which also gives the TAP carrier), and serves the vsock
// uds_path the way Firecracker's host side does: a host connection sends "CONNECT <port>\n" and,
// when a guest listens on that port, gets "OK <local port>\n" and a byte stream to it. The guest
// side is simulated by unix sockets FCSIM_GUEST_VSOCK_DIR/<port>.sock (no vsock on this host).
type devices struct {
	id       string
	guestDir string

	mu   sync.Mutex
	taps []*os.File
	ln   net.Listener
	next int
}

func newDevices(id string) *devices {
	return &devices{id: id, guestDir: os.Getenv("FCSIM_GUEST_VSOCK_DIR"), next: 1 << 30}
}

func (d *devices) start(taps map[string]string, udsPath string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, name := range taps {
		f, err := openTAP(name)
		if err != nil {
			return fmt.Errorf("interface %s: %w", id, err)
		}
		d.taps = append(d.taps, f)
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
	if err != nil || d.guestDir == "" {
		return
	}
	g, err := net.Dial("unix", filepath.Join(d.guestDir, strconv.FormatUint(port, 10)+".sock"))
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
	for _, f := range d.taps {
		f.Close()
	}
	if d.ln != nil {
		d.ln.Close()
	}
}
