package netns

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// A node's names (attachment aliases, S8) live in its own hosts file, StateDir/NAME.hosts: the
// host's /etc/hosts followed by the owner's marker line and the entries. The main process and
// every exec get it at /etc/hosts through a private mount namespace, as `ip netns exec` does
// with /etc/netns/NAME/hosts. A node with no hosts file sees the host's.

// hostsSource is the file a node's hosts file starts with.
var hostsSource = "/etc/hosts"

func (d *Driver) hostsPath(name string) string { return filepath.Join(d.StateDir, name+".hosts") }

// SetHosts implements driver.Hosts: it (re)writes the node's hosts file in place, so running
// processes see the change at once. The node's namespace must carry owner's marker.
//
// The executor calls it before and after StartNode with the same entries. A file this Driver
// wrote (or found equal) with exactly the content wanted, still the same inode, size and
// modification and change times since, is left alone without reading it or checking the
// marker: there is nothing to write, so nothing to authorise (hostsMemo).
func (d *Driver) SetHosts(ctx context.Context, node substrate.Handle, owner substrate.Owner, entries []driver.HostEntry) error {
	ns, ino, err := d.nodeNetns(node)
	if err != nil {
		return fmt.Errorf("node %s: hosts: %w", owner.Address, err)
	}
	base, err := d.hosts.base()
	if err != nil {
		return fmt.Errorf("node %s: hosts: %w", owner.Address, err)
	}
	name := filepath.Base(ns.Path)
	path := d.hostsPath(name)
	content := linuxnet.RenderHosts(base, owner, entries)
	sum := sha256.Sum256(content)
	if d.hosts.unchanged(path, sum) {
		return nil
	}
	o, err := d.cachedMarker(ns, ino)
	if err != nil {
		return fmt.Errorf("node %s: hosts: %w", owner.Address, err)
	}
	if !o.Equal(owner) {
		return fmt.Errorf("node %s: hosts: namespace %s carries %s %s (topology %s, generation %d): %w",
			owner.Address, ns.Path, o.Type, o.Address, o.Topology, o.Generation, driver.ErrNotOwned)
	}
	if err := linuxnet.WriteHostsInPlace(path, content); err != nil {
		return fmt.Errorf("node %s: hosts: %w", owner.Address, err)
	}
	d.hosts.wrote(path, sum)
	return nil
}

// hostsMemo remembers, in memory, the base file's content (hostsSource, by its identity) and
// the digest and identity of each node hosts file as this Driver last left it. Identity is
// device, inode, size, modification and change time: a write to the file, in place or by
// replacing it, changes the change time, and the next SetHosts then compares and rewrites as
// before. (A same-size edit within one timestamp tick of the filesystem could pass unseen by
// this process; the next command, another process, compares the content again.)
type hostsMemo struct {
	mu       sync.Mutex
	baseID   fileID
	baseData []byte
	baseOK   bool
	files    map[string]hostsWritten
	skips    int // SetHosts calls that found the file as wanted (tests)
}

type hostsWritten struct {
	sum [sha256.Size]byte
	id  fileID
}

type fileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("%s: %w", path, err) // errors.Is(err, os.ErrNotExist) holds for ENOENT
	}
	return idOf(&st), nil
}

func idOf(st *unix.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// base returns hostsSource's content (nil when it does not exist), read again only when its
// identity changed.
func (m *hostsMemo) base() ([]byte, error) {
	id, err := statID(hostsSource)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.baseOK && m.baseID == id {
		b := m.baseData
		m.mu.Unlock()
		return b, nil
	}
	m.mu.Unlock()
	f, err := os.Open(hostsSource)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", hostsSource, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	// The identity taken before the read: a write during it changes the file's identity, and
	// the next call reads again.
	m.baseID, m.baseData, m.baseOK = idOf(&st), b, true
	m.mu.Unlock()
	return b, nil
}

// unchanged reports whether path is as this Driver last left it, holding content of digest sum.
func (m *hostsMemo) unchanged(path string, sum [sha256.Size]byte) bool {
	m.mu.Lock()
	w, ok := m.files[path]
	m.mu.Unlock()
	if !ok || w.sum != sum {
		return false
	}
	id, err := statID(path)
	if err != nil || id != w.id {
		return false
	}
	m.mu.Lock()
	m.skips++
	m.mu.Unlock()
	return true
}

// wrote records that path now holds content of digest sum (WriteHostsInPlace returned).
func (m *hostsMemo) wrote(path string, sum [sha256.Size]byte) {
	id, err := statID(path)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		delete(m.files, path)
		return
	}
	if m.files == nil {
		m.files = map[string]hostsWritten{}
	}
	m.files[path] = hostsWritten{sum: sum, id: id}
}

// forget drops what is remembered of path (its node is deleted).
func (m *hostsMemo) forget(path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.files, path)
}

// mountHosts, on a locked thread already inside the node's namespaces, gives the thread (and
// what it forks) a private mount namespace with the node's hosts file over /etc/hosts. The
// namespace is a copy of a template (the host's mounts as slaves, so that nothing propagates
// back to the host; see mountTemplate). The thread cannot be returned to the host's mount
// namespace and must be discarded.
func mountHosts(hostsFile, netnsDir string) error {
	tmpl, err := templates.acquire(netnsDir)
	if err != nil {
		return err
	}
	defer templates.release(tmpl)
	// setns into a mount namespace needs a thread that shares no filesystem context.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare filesystem context: %w", err)
	}
	if err := unix.Setns(tmpl.fd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter template mount namespace: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount(hostsFile, "/etc/hosts", "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over /etc/hosts: %w", hostsFile, err)
	}
	return nil
}

// A mount template is a mount namespace that is the host's with every mount made a slave and
// the namespaces directory (a shared mount holding every node's namespace) detached. Nodes'
// mount namespaces are copies of it rather than of the host's: a copy of the host's carried
// one mount per existing node (O(N) to copy, per node), and as a slave of the namespaces
// directory it received every namespace mounted or unmounted there later (O(running nodes) in
// the kernel per node create and delete): together the largest part of apply's growth at 1,000
// nodes. Other nodes' namespaces have no use inside a node.
//
// A template is a snapshot: host mounts made or removed later in a private part of the host's
// tree do not reach it (shared ones do, as they reach running nodes), and it keeps what it
// copied mounted. So it is replaced once it is templateMaxAge old, and closed when the last
// node start using it is done.
const templateMaxAge = 30 * time.Second

type mountTemplate struct {
	fd    int
	made  time.Time
	users int
	stale bool
}

type templateSet struct {
	mu  sync.Mutex
	cur map[string]*mountTemplate // by namespaces directory
}

var templates = &templateSet{cur: map[string]*mountTemplate{}}

func (s *templateSet) acquire(netnsDir string) (*mountTemplate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.cur[netnsDir]
	if t == nil || time.Since(t.made) > templateMaxAge {
		fd, err := newMountTemplate(netnsDir)
		if err != nil {
			return nil, err
		}
		if t != nil {
			s.retire(t)
		}
		t = &mountTemplate{fd: fd, made: time.Now()}
		s.cur[netnsDir] = t
	}
	t.users++
	return t, nil
}

func (s *templateSet) release(t *mountTemplate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t.users--
	if t.stale && t.users == 0 {
		_ = unix.Close(t.fd)
	}
}

// retire marks t replaced; it is closed now or by its last user. Called with s.mu held.
func (s *templateSet) retire(t *mountTemplate) {
	t.stale = true
	if t.users == 0 {
		_ = unix.Close(t.fd)
	}
}

// newMountTemplate makes a template on a thread of its own and returns a descriptor of it. The
// thread stays in the template's mount namespace and ends with its goroutine (onThread).
func newMountTemplate(netnsDir string) (int, error) {
	fd := -1
	err := onThread(func() (bool, error) {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return true, fmt.Errorf("unshare mount namespace: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
			return false, fmt.Errorf("make mounts slaves: %w", err)
		}
		if err := unix.Unmount(netnsDir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return false, fmt.Errorf("detach %s: %w", netnsDir, err)
		}
		var err error
		fd, err = unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/mnt", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		return false, err
	})
	if err != nil {
		return -1, fmt.Errorf("template mount namespace: %w", err)
	}
	return fd, nil
}

// hostsResidue lists hosts files carrying topology's marker whose namespace is not listed; a
// hosts file whose owner cannot be read is an error (the audit cannot say it is not ours).
func (d *Driver) hostsResidue(topology string, listed map[string]bool) ([]substrate.Object, error) {
	ents, err := os.ReadDir(d.StateDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("residue: %w", err)
	}
	var out []substrate.Object
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".hosts")
		if !ok || listed[name] {
			continue
		}
		o, err := linuxnet.HostsOwner(d.hostsPath(name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			// Unattributable is not clean: it may be this topology's (as for sidecars).
			return nil, fmt.Errorf("residue: hosts file %s: %w", d.hostsPath(name), err)
		}
		if o.Topology == topology {
			out = append(out, substrate.Object{Kind: "netns-hosts", ExternalID: d.hostsPath(name), Owner: o})
		}
	}
	return out, nil
}
