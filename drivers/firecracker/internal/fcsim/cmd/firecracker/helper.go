package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/firecracker/internal/fcsim"
)

// The guest helper. Under the jailer stand-in the VMM runs chrooted as an unprivileged uid: it
// can open existing TAPs (through the jail's /dev/net/tun, as Firecracker does) but cannot
// create the simulated guest, which needs a network namespace, TAPs inside it and the guest
// agent binary outside the jail. A real VMM gets its guest from KVM, not from privileges. So
// the jailer stand-in starts this helper (the same binary, --fcsim-guest-helper) before it
// drops privileges, outside the jail, as root: the helper stands for the guest hardware. The
// jailed VMM opens the host TAPs itself and hands their descriptors to the helper over a
// SOCK_SEQPACKET pair (SCM_RIGHTS); the helper runs sysbox-guest in its own network namespace,
// pumps frames, and puts the agent's vsock ports under CHROOT/guest, where the VMM's vsock
// host side dials them. The helper ends, killing the guest, when the VMM's end closes.

// helperMsg is one request from the VMM; the answer is a helperReply.
type helperMsg struct {
	Op     string      `json:"op"` // "start", "pause", "stop"
	NICs   []fcsim.NIC `json:"nics,omitempty"`
	Paused bool        `json:"paused,omitempty"`
}

type helperReply struct {
	Error string `json:"error,omitempty"`
}

// guestHelper is the VMM's end of the helper connection.
type guestHelper struct{ f *os.File }

// call sends m (with fds) and waits for the answer.
func (h *guestHelper) call(m helperMsg, files []*os.File) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(int(h.f.Fd()), b, oob, nil, 0); err != nil {
		return fmt.Errorf("guest helper: send: %w", err)
	}
	buf := make([]byte, 4096)
	n, _, _, _, err := unix.Recvmsg(int(h.f.Fd()), buf, nil, 0)
	if err != nil || n == 0 {
		return fmt.Errorf("guest helper: no answer: %v", err)
	}
	var r helperReply
	if err := json.Unmarshal(buf[:n], &r); err != nil {
		return fmt.Errorf("guest helper: answer: %w", err)
	}
	if r.Error != "" {
		return errors.New(r.Error)
	}
	return nil
}

// runHelper serves the VMM on conn until it closes: dir is the chroot's guest directory on
// the host, uid and gid the VMM's (it must reach the agent's sockets there).
func runHelper(conn *os.File, dir string, uid, gid int) error {
	// The agent's sockets must accept the VMM's uid; dir (0700, owned by it) guards them.
	syscall.Umask(0)
	unix.CloseOnExec(int(conn.Fd())) // the guest agent has no business with it
	dev := newDevices("guest-helper", "")
	dev.guestDir = dir
	defer dev.close()
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(64*4))
	for {
		// CLOEXEC: the guest agent started next must not inherit the host TAPs.
		n, oobn, _, _, err := unix.Recvmsg(int(conn.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		if n == 0 {
			return nil // the VMM is gone: so is its guest
		}
		var files []*os.File
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return err
			}
			for _, m := range msgs {
				fds, err := unix.ParseUnixRights(&m)
				if err != nil {
					return err
				}
				for _, fd := range fds {
					files = append(files, os.NewFile(uintptr(fd), "tap"))
				}
			}
		}
		var m helperMsg
		err = json.Unmarshal(buf[:n], &m)
		if err == nil {
			err = dev.helperOp(m, files, uid, gid)
		}
		var r helperReply
		if err != nil {
			r.Error = err.Error()
		}
		b, _ := json.Marshal(r)
		if _, err := conn.Write(b); err != nil {
			return err
		}
	}
}

func (d *devices) helperOp(m helperMsg, files []*os.File, uid, gid int) error {
	switch m.Op {
	case "start":
		if len(files) != len(m.NICs) {
			return fmt.Errorf("start: %d TAP descriptors for %d interfaces", len(files), len(m.NICs))
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		d.files = append(d.files, files...)
		if d.agent == "" {
			return nil
		}
		if err := os.MkdirAll(d.guestDir, 0o700); err != nil {
			return fmt.Errorf("guest: %w", err)
		}
		if err := os.Chown(d.guestDir, uid, gid); err != nil {
			return fmt.Errorf("guest: %w", err)
		}
		return d.startGuest(m.NICs, files)
	case "pause":
		return d.pause(m.Paused)
	case "stop":
		d.close()
		return nil
	}
	return fmt.Errorf("unknown operation %q", m.Op)
}
