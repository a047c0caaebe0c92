package netns

import (
	"fmt"
	"sync"
	"time"

	"zyvor.dev/sysbox/drivers/linuxnet"
)

// Applying a node calls the driver six or seven times (CreateNode, Attach per attachment,
// ConfigureGuestNetwork, SetHosts, StartNode, SetHosts, ObserveNode), and each call used to open
// the namespace's path, switch a thread into the namespace to make a netlink socket there and
// switch it back. The connection cache keeps one open descriptor and netlink socket per
// namespace for the calls that follow each other within moments, keyed by name and nsfs inode:
// a namespace replaced at the same path has another inode, so it never meets an old entry. The
// first entry of a namespace this Driver creates is the socket its creation thread made inside
// it to mark it, so a node created and wired by one command never has its path opened for
// netlink at all.
//
// A cached socket holds its namespace alive. So entries go when their namespace is deleted
// (forget, before the unmount), after connIdle without use, and beyond connMax; an entry in use
// is closed by its last user. Ownership checks are not cached: every call still reads the
// marker through the socket.
const (
	connIdle = 2 * time.Second
	connMax  = 64
)

type nsConn struct {
	linuxnet.NodeConn
	key   string
	name  string
	users int
	dead  bool
	used  time.Time
}

type connCache struct {
	mu    sync.Mutex
	m     map[string]*nsConn
	timer *time.Timer
	opens int // namespaces opened by acquire (tests)
}

// acquire returns the cached connection to namespace name with nsfs inode ino (opening path if
// there is none); the caller releases it.
func (cc *connCache) acquire(name, path string, ino uint64) (*nsConn, error) {
	key := freshKey(name, ino)
	cc.mu.Lock()
	if c := cc.m[key]; c != nil {
		c.users++
		c.used = time.Now()
		cc.mu.Unlock()
		return c, nil
	}
	cc.opens++
	cc.mu.Unlock()
	conn, err := linuxnet.Netns{Path: path}.OpenConn()
	if err != nil {
		return nil, err
	}
	got, err := fdInode(int(conn.Fd))
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("netns %s: %w", path, err)
	}
	if got != ino {
		conn.Close()
		return nil, fmt.Errorf("netns %s: namespace replaced while opening it (inode %d, expected %d)", path, got, ino)
	}
	return cc.add(name, ino, conn, 1), nil
}

// put caches conn, a connection to namespace name with inode ino that the caller made, unused.
func (cc *connCache) put(name string, ino uint64, conn linuxnet.NodeConn) {
	cc.add(name, ino, conn, 0)
}

func (cc *connCache) add(name string, ino uint64, conn linuxnet.NodeConn, users int) *nsConn {
	key := freshKey(name, ino)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if c := cc.m[key]; c != nil { // made by a concurrent caller meanwhile
		conn.Close()
		c.users += users
		c.used = time.Now()
		return c
	}
	if cc.m == nil {
		cc.m = map[string]*nsConn{}
	}
	c := &nsConn{NodeConn: conn, key: key, name: name, users: users, used: time.Now()}
	cc.m[key] = c
	cc.sweepLocked(time.Now())
	if cc.timer == nil {
		cc.timer = time.AfterFunc(connIdle, cc.tick)
	}
	return c
}

func (cc *connCache) release(c *nsConn) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	c.users--
	c.used = time.Now()
	if c.dead && c.users == 0 {
		c.Close()
	}
}

// forget drops every entry of namespace name: called before the namespace is deleted, so that
// no socket of this process keeps it (and the veths inside it) alive.
func (cc *connCache) forget(name string) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	for k, c := range cc.m {
		if c.name == name {
			cc.dropLocked(k, c)
		}
	}
}

func (cc *connCache) dropLocked(k string, c *nsConn) {
	delete(cc.m, k)
	c.dead = true
	if c.users == 0 {
		c.Close()
	}
}

// sweepLocked drops entries idle for connIdle, then the least recently used idle ones beyond
// connMax.
func (cc *connCache) sweepLocked(now time.Time) {
	for k, c := range cc.m {
		if c.users == 0 && now.Sub(c.used) >= connIdle {
			cc.dropLocked(k, c)
		}
	}
	for len(cc.m) > connMax {
		var oldest *nsConn
		for _, c := range cc.m {
			if c.users == 0 && (oldest == nil || c.used.Before(oldest.used)) {
				oldest = c
			}
		}
		if oldest == nil {
			return // all in use: they go when released and idle
		}
		cc.dropLocked(oldest.key, oldest)
	}
}

// tick sweeps while entries remain, so that idle sockets do not outlive their use by much
// when no further call comes.
func (cc *connCache) tick() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.sweepLocked(time.Now())
	if len(cc.m) == 0 {
		cc.timer = nil
		return
	}
	cc.timer.Reset(connIdle)
}

// size is the number of cached entries (tests).
func (cc *connCache) size() int {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return len(cc.m)
}
