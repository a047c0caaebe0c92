package guestagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// VirtioPortName is the virtio-serial port name QEMU and libvirt give the guest agent channel.
const VirtioPortName = "org.qemu.guest_agent.0"

// FindVirtioPort returns the device of the virtio-serial port called name, looked up through
// sysDir (normally /sys/class/virtio-ports: each vportNpM has a "name" file) since a minimal
// guest has no udev to make /dev/virtio-ports/NAME. If devDir (normally /dev) lacks the node,
// it is made from the port's "dev" file.
func FindVirtioPort(sysDir, devDir, name string) (string, error) {
	ents, err := os.ReadDir(sysDir)
	if err != nil {
		return "", fmt.Errorf("virtio port %s: %w", name, err)
	}
	var seen []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(sysDir, e.Name(), "name"))
		if err != nil {
			continue // a port without a name
		}
		got := strings.TrimSpace(string(b))
		seen = append(seen, e.Name()+"="+got)
		if got != name {
			continue
		}
		dev := filepath.Join(devDir, e.Name())
		if _, err := os.Stat(dev); err == nil {
			return dev, nil
		}
		if err := mknodFrom(filepath.Join(sysDir, e.Name(), "dev"), dev); err != nil {
			return "", fmt.Errorf("virtio port %s (%s): %w", name, e.Name(), err)
		}
		return dev, nil
	}
	return "", fmt.Errorf("virtio port %s: not among %s (ports: %s)", name, sysDir, strings.Join(seen, ", "))
}

// mknodFrom makes the character device dev with the "major:minor" numbers in devFile.
func mknodFrom(devFile, dev string) error {
	b, err := os.ReadFile(devFile)
	if err != nil {
		return err
	}
	maj, min, ok := strings.Cut(strings.TrimSpace(string(b)), ":")
	ma, err1 := strconv.ParseUint(maj, 10, 32)
	mi, err2 := strconv.ParseUint(min, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return fmt.Errorf("%s: bad device number %q", devFile, b)
	}
	if err := unix.Mknod(dev, unix.S_IFCHR|0o600, int(unix.Mkdev(uint32(ma), uint32(mi)))); err != nil {
		return fmt.Errorf("mknod %s: %w", dev, err)
	}
	return nil
}

// ServeDevice serves a virtio-serial port device until ctx ends. A read of a port whose host
// side is not connected returns end of file, so that (and any other error) means: wait briefly,
// then read again (reopening the device after an error other than end of file).
func (s *Server) ServeDevice(ctx context.Context, path string) error {
	for ctx.Err() == nil {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("virtio port %s: %w", path, err)
		}
		stop := context.AfterFunc(ctx, func() { f.Close() })
		for ctx.Err() == nil {
			err = s.Serve(ctx, f)
			if !errors.Is(err, io.EOF) {
				break
			}
			sleep(ctx, 100*time.Millisecond)
		}
		stop()
		f.Close()
		if ctx.Err() == nil {
			slog.Warn("guest agent: virtio port failed; reopening", "port", path, "err", err)
			sleep(ctx, time.Second)
		}
	}
	return ctx.Err()
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// ServeListener serves every connection accepted on l until ctx ends or l fails.
func (s *Server) ServeListener(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("guest agent listener %s: %w", l.Addr(), err)
		}
		go func() {
			defer c.Close()
			cstop := context.AfterFunc(ctx, func() { c.Close() })
			defer cstop()
			_ = s.Serve(ctx, c) // the peer hung up or broke the stream: drop this connection only
		}()
	}
}

// ListenVsock listens on AF_VSOCK port (any CID), as a guest serving Firecracker's vsock.
func ListenVsock(port uint32) (net.Listener, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("vsock port %d: socket: %w", port, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: port}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vsock port %d: bind: %w", port, err)
	}
	if err := unix.Listen(fd, 16); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("vsock port %d: listen: %w", port, err)
	}
	return &vsockListener{f: os.NewFile(uintptr(fd), fmt.Sprintf("vsock:%d", port)), port: port}, nil
}

// vsockListener is a net.Listener over a vsock socket: the net package cannot wrap AF_VSOCK.
type vsockListener struct {
	f    *os.File
	port uint32
}

func (l *vsockListener) Accept() (net.Conn, error) {
	rc, err := l.f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var nfd int
	var aerr error
	// Non-blocking sockets: os.File puts them in the runtime poller, so Accept waits there and
	// Close wakes it.
	err = rc.Read(func(fd uintptr) bool {
		nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		return aerr != unix.EAGAIN
	})
	if err != nil {
		return nil, fmt.Errorf("vsock port %d: accept: %w", l.port, err)
	}
	if aerr != nil {
		return nil, fmt.Errorf("vsock port %d: accept: %w", l.port, aerr)
	}
	return &vsockConn{File: os.NewFile(uintptr(nfd), fmt.Sprintf("vsock:%d:conn", l.port)), port: l.port}, nil
}

func (l *vsockListener) Close() error   { return l.f.Close() }
func (l *vsockListener) Addr() net.Addr { return vsockAddr(l.port) }

type vsockAddr uint32

func (a vsockAddr) Network() string { return "vsock" }
func (a vsockAddr) String() string  { return "vsock:" + strconv.FormatUint(uint64(a), 10) }

// vsockConn is an accepted vsock connection as a net.Conn (deadlines through the os.File).
type vsockConn struct {
	*os.File
	port uint32
}

func (c *vsockConn) LocalAddr() net.Addr  { return vsockAddr(c.port) }
func (c *vsockConn) RemoteAddr() net.Addr { return vsockAddr(0) }
