package docker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var _ driver.Hosts = (*Driver)(nil)

// SetHosts implements driver.Hosts: the running container's /etc/hosts gets the owner's marker
// line and the entries after its base lines. A container that is not running gets nothing now
// (the executor calls again after StartNode).
//
// Containers the driver creates have no Docker network sandbox (NetworkDisabled, see
// CreateNode), so Docker keeps no hosts file for them: the file is the container's own
// /etc/hosts, written from the host inside the container's root (see writeContainerHosts), with
// localhost lines as its base, and it stays with the container across restarts. A container
// that has a hosts file of Docker's (HostsPath: one imported, or created by an earlier sysbox)
// gets that file rewritten in place instead, after Docker's own lines; Docker rebuilds it when
// the container starts.
func (d *Driver) SetHosts(ctx context.Context, node substrate.Handle, owner substrate.Owner, entries []driver.HostEntry) error {
	what := "node " + owner.Address + ": hosts"
	r, ok := d.live.lookup(node.ExternalID)
	if ok {
		if _, err := d.ownedID(ctx, what, node, owner); err != nil {
			return err
		}
	} else {
		ins, err := d.inspectOwned(ctx, what, node, owner)
		if err != nil {
			return err
		}
		r, ok = d.live.note(ins)
	}
	if !ok {
		return nil
	}
	if r.HostsPath == "" {
		if err := writeContainerHosts(r, owner, entries); err != nil {
			return fmt.Errorf("%s: container %s: %w", what, short(r.ID), err)
		}
		return nil
	}
	cur, err := os.ReadFile(r.HostsPath)
	if err != nil {
		return fmt.Errorf("%s: container %s: %w", what, short(r.ID), err)
	}
	if err := linuxnet.WriteHostsInPlace(r.HostsPath, linuxnet.RenderHosts(baseHosts(cur), owner, entries)); err != nil {
		return fmt.Errorf("%s: container %s: %w", what, short(r.ID), err)
	}
	return nil
}

// maxHostsFile bounds the container's /etc/hosts that SetHosts reads and rewrites.
const maxHostsFile = 1 << 20

// readHosts reads a hosts file whole, refusing one over maxHostsFile: its rewrite keeps the lines
// it read, so a cut-off read would silently drop the rest.
func readHosts(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxHostsFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxHostsFile {
		return nil, fmt.Errorf("larger than %d bytes: not rewritten", maxHostsFile)
	}
	return b, nil
}

// localhostLines are what Docker writes into the hosts file of a container without networks.
const localhostLines = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\nff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"

// baseHosts returns the lines of hosts file content cur that precede our marker line (if an
// earlier call wrote one), or the localhost lines when there are none.
func baseHosts(cur []byte) []byte {
	if i := bytes.Index(cur, []byte(linuxnet.HostsMarkerPrefix)); i >= 0 {
		cur = cur[:i]
	}
	if len(bytes.TrimSpace(cur)) == 0 {
		return []byte(localhostLines)
	}
	return cur
}

// writeContainerHosts rewrites /etc/hosts inside running container r (its base lines, then
// owner's section) in place, so the inode the container may hold open stays the same.
// The path is resolved inside the container's root (openat2 RESOLVE_IN_ROOT), so that a symlink
// in the container cannot lead the host's write out of it, and the file must be a regular
// file. The root is that of r's pid, checked to be still one of the container's processes after
// it was opened.
func writeContainerHosts(r running, owner substrate.Owner, entries []driver.HostEntry) error {
	root, err := unix.Open("/proc/"+strconv.Itoa(r.Pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("root of pid %d: %w", r.Pid, err)
	}
	defer unix.Close(root)
	if !inContainer(r.Pid, r.ID) {
		return fmt.Errorf("pid %d is no longer the container's: %w", r.Pid, driver.ErrNotFound)
	}
	fd, err := unix.Openat2(root, "/etc/hosts", &unix.OpenHow{
		Flags:   unix.O_RDWR | unix.O_CREAT | unix.O_CLOEXEC | unix.O_NONBLOCK,
		Mode:    0o644,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return fmt.Errorf("open /etc/hosts in the container: %w", err)
	}
	f := os.NewFile(uintptr(fd), "/etc/hosts")
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return fmt.Errorf("/etc/hosts in the container: %w", err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("/etc/hosts in the container is a %s, not a regular file", fi.Mode().Type())
	}
	cur, err := readHosts(f)
	if err != nil {
		return fmt.Errorf("read /etc/hosts in the container: %w", err)
	}
	content := linuxnet.RenderHosts(baseHosts(cur), owner, entries)
	return linuxnet.RewriteInPlace(f, "/etc/hosts in the container", cur, content)
}
