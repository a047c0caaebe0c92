package netns

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestConnCacheBoundsAndForget (unit): entries beyond connMax and entries idle for connIdle
// are closed; a forgotten entry still in use is closed by its last user, not before; the zero
// NodeConn closes nothing (not descriptor 0).
func TestConnCacheBoundsAndForget(t *testing.T) {
	var cc connCache
	closed := func(c *nsConn) bool { return c.dead && c.users == 0 }
	for i := range connMax + 5 {
		cc.put("ns"+strconv.Itoa(i), uint64(i+1), linuxnet.NodeConn{})
		time.Sleep(time.Microsecond) // distinct use times: the oldest go first
	}
	if n := cc.size(); n != connMax {
		t.Fatalf("cache holds %d entries, want %d", n, connMax)
	}
	for i := range 5 {
		if _, ok := cc.m[freshKey("ns"+strconv.Itoa(i), uint64(i+1))]; ok {
			t.Errorf("oldest entry ns%d kept beyond connMax", i)
		}
	}
	c, err := cc.acquire("ns10", "/nonexistent", 11) // cached: the path is not opened
	if err != nil {
		t.Fatal(err)
	}
	cc.forget("ns10")
	if closed(c) || !c.dead {
		t.Fatalf("forgotten entry in use: dead=%v users=%d, want dead and still held", c.dead, c.users)
	}
	if _, err := cc.acquire("ns10", "/nonexistent", 11); err == nil {
		t.Fatal("a forgotten entry was served again")
	}
	cc.release(c)
	if !closed(c) {
		t.Fatal("forgotten entry not closed by its last user")
	}
	cc.mu.Lock()
	cc.sweepLocked(time.Now().Add(connIdle))
	cc.mu.Unlock()
	if n := cc.size(); n != 0 {
		t.Fatalf("%d entries left after connIdle without use, want 0", n)
	}
	var before, after unix.Stat_t
	if err := unix.Fstat(0, &before); err != nil {
		t.Skip("no descriptor 0")
	}
	linuxnet.NodeConn{}.Close()
	if err := unix.Fstat(0, &after); err != nil || after.Ino != before.Ino {
		t.Fatalf("closing the zero NodeConn closed descriptor 0: %v", err)
	}
}

// TestKernelNodeWiredThroughOneConnection (kernel tier): creating, wiring, naming (twice),
// starting and observing a node through one Driver opens its namespace's path for netlink not
// once (the creation thread's socket serves them all); the second SetHosts with the same
// entries is the cheap path; deleting the node leaves no descriptor of its namespace in this
// process (a cached socket or descriptor would keep the namespace and its veths alive). A
// second Driver (another command) opens the namespace once for several calls.
func TestKernelNodeWiredThroughOneConnection(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	nh, no := l.network("sysbox_network.lan", "198.51.100.0/24")
	n := l.node("sysbox_node.a", []string{l.busybox, "sleep", "3600"},
		substrate.AttachmentSpec{Name: "lan", Network: nh, IPv4: []string{"198.51.100.41/24"}})
	entries := []driver.HostEntry{{Address: "198.51.100.41", Names: []string{"alpha"}}}
	for range 2 {
		if err := l.d.SetHosts(ctx, n.h, n.owner, entries); err != nil {
			t.Fatalf("SetHosts: %v", err)
		}
	}
	if obs, err := l.d.ObserveNode(ctx, n.h, n.owner); err != nil || obs.Status != substrate.Present {
		t.Fatalf("ObserveNode: %+v, %v", obs, err)
	}
	if l.d.conns.opens != 0 {
		t.Errorf("namespace opened %d times for netlink by the Driver that created it, want 0", l.d.conns.opens)
	}
	if l.d.hosts.skips != 1 {
		t.Errorf("SetHosts took the cheap path %d times, want 1 (the second call)", l.d.hosts.skips)
	}

	other := New()
	for range 3 {
		if obs, err := other.ObserveNode(ctx, n.h, n.owner); err != nil || obs.Status != substrate.Present {
			t.Fatalf("ObserveNode (second Driver): %+v, %v", obs, err)
		}
	}
	if other.conns.opens != 1 {
		t.Errorf("second Driver opened the namespace %d times for three observations, want 1", other.conns.opens)
	}

	ino, err := nsInode(l.d.nsPath(filepath.Base(n.h.ExternalID)))
	if err != nil {
		t.Fatal(err)
	}
	l.destroy([]*testNode{n}, testNet{nh, no})
	other.conns.forget(n.h.ExternalID) // another command's cache goes with its process
	if k := l.d.conns.size(); k != 0 {
		t.Errorf("%d cached connections after the delete, want 0", k)
	}
	if fds := nsFds(t, ino); len(fds) != 0 {
		t.Errorf("descriptors %v of this process still refer to the deleted namespace net:[%d]", fds, ino)
	}
}

// nsFds lists this process's descriptors that are the network namespace with inode ino.
func nsFds(t *testing.T, ino uint64) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	want := "net:[" + strconv.FormatUint(ino, 10) + "]"
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == want {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestKernelConfigureSkipsOnlyWhatThisDriverWired (kernel tier): ConfigureGuestNetwork right
// after Attach does not redo the address and link state Attach set (an address removed out of
// band in between stays removed: the request was skipped), once: a second call configures in
// full; and a Driver that did not wire the interface (a later command, after a crash)
// configures in full as before.
func TestKernelConfigureSkipsOnlyWhatThisDriverWired(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	nh, no := l.network("sysbox_network.lan", "198.51.100.0/24")
	o := l.owner("sysbox_node", "sysbox_node.a")
	h, err := l.d.CreateNode(ctx, substrate.NodeSpec{Owner: o, Driver: Name})
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.d.Attach(ctx, h, substrate.AttachmentSpec{Owner: o, Node: o.Address, Name: "lan", Network: nh, IPv4: []string{"198.51.100.42/24"}})
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{h: h, owner: o, atts: []substrate.AttachmentState{st}}
	defer l.destroy([]*testNode{n}, testNet{nh, no})
	p, err := decode(st.Private, kindAttachment)
	if err != nil {
		t.Fatal(err)
	}
	ns := l.d.ns(h.ExternalID)
	unconfigure := func() {
		t.Helper()
		nsh, err := ns.Netlink()
		if err != nil {
			t.Fatal(err)
		}
		defer nsh.Close()
		link, err := nsh.LinkByName(p.Veth.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := netlink.ParseAddr("198.51.100.42/24")
		if err := nsh.AddrDel(link, addr); err != nil {
			t.Fatal(err)
		}
		if err := nsh.LinkSetDown(link); err != nil {
			t.Fatal(err)
		}
	}
	configured := func() bool {
		t.Helper()
		nsh, err := ns.Netlink()
		if err != nil {
			t.Fatal(err)
		}
		defer nsh.Close()
		link, err := nsh.LinkByName(p.Veth.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := nsh.AddrList(link, netlink.FAMILY_V4)
		if err != nil {
			t.Fatal(err)
		}
		return len(addrs) == 1 && addrs[0].IPNet.String() == "198.51.100.42/24" && link.Attrs().RawFlags&unix.IFF_UP != 0
	}
	if !configured() {
		t.Fatal("Attach did not address the node side and bring it up")
	}
	unconfigure()
	if err := l.d.ConfigureGuestNetwork(ctx, h, n.atts, nil); err != nil {
		t.Fatal(err)
	}
	if configured() {
		t.Error("ConfigureGuestNetwork right after this Driver's Attach redid the address and link state")
	}
	if err := l.d.ConfigureGuestNetwork(ctx, h, n.atts, nil); err != nil {
		t.Fatal(err)
	}
	if !configured() {
		t.Error("a second ConfigureGuestNetwork did not configure the interface")
	}
	unconfigure()
	if err := New().ConfigureGuestNetwork(ctx, h, n.atts, nil); err != nil {
		t.Fatal(err)
	}
	if !configured() {
		t.Error("ConfigureGuestNetwork of a Driver that did not wire the interface did not configure it")
	}
}

// TestKernelSetHostsRewritesAfterOutOfBandEdit (kernel tier): the cheap path of an unchanged
// SetHosts holds only while the file is as this Driver left it: an edit in place of the same
// size, a longer one, or a replacement of the file is repaired by the next SetHosts; a stranger
// owner's entries are still refused.
func TestKernelSetHostsRewritesAfterOutOfBandEdit(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	nh, no := l.network("sysbox_network.lan", "198.51.100.0/24")
	n := l.node("sysbox_node.a", nil, substrate.AttachmentSpec{Name: "lan", Network: nh, IPv4: []string{"198.51.100.43/24"}})
	defer l.destroy([]*testNode{n}, testNet{nh, no})
	entries := []driver.HostEntry{{Address: "198.51.100.43", Names: []string{"alpha"}}}
	if err := l.d.SetHosts(ctx, n.h, n.owner, entries); err != nil {
		t.Fatal(err)
	}
	path := l.d.hostsPath(n.h.ExternalID)
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edits := map[string]func() error{
		"same size in place": func() error {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("#"), int64(len(want)-2))
			return err
		},
		"appended": func() error {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteString("192.0.2.99\tintruder\n")
			return err
		},
		"replaced": func() error {
			tmp := path + ".edit"
			if err := os.WriteFile(tmp, want[:len(want)-1], 0o644); err != nil {
				return err
			}
			return os.Rename(tmp, path)
		},
	}
	for _, name := range []string{"same size in place", "appended", "replaced"} {
		if err := edits[name](); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		skips := l.d.hosts.skips
		if err := l.d.SetHosts(ctx, n.h, n.owner, entries); err != nil {
			t.Fatalf("%s: SetHosts: %v", name, err)
		}
		if got, err := os.ReadFile(path); err != nil || string(got) != string(want) {
			t.Errorf("%s: hosts file not repaired by SetHosts:\n%s", name, got)
		}
		if l.d.hosts.skips != skips {
			t.Errorf("%s: SetHosts took the cheap path over an edited file", name)
		}
	}
	stranger := n.owner
	stranger.Topology += "-other"
	if err := l.d.SetHosts(ctx, n.h, stranger, entries); err == nil {
		t.Error("SetHosts for a stranger owner succeeded")
	}
}

// TestKernelCreatedNamespaceConnIsTheNamespace (kernel tier): the descriptor kept from the
// creation thread is the namespace mounted at the node's path, and the creation thread went
// back to the host's namespace.
func TestKernelCreatedNamespaceConnIsTheNamespace(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	o := l.owner("sysbox_node", "sysbox_node.a")
	h, err := l.d.CreateNode(ctx, substrate.NodeSpec{Owner: o, Driver: Name})
	if err != nil {
		t.Fatal(err)
	}
	defer l.destroy([]*testNode{{h: h, owner: o}})
	ino, err := nsInode(l.d.nsPath(h.ExternalID))
	if err != nil {
		t.Fatal(err)
	}
	c := l.d.conns.m[freshKey(h.ExternalID, ino)]
	if c == nil {
		t.Fatal("no connection cached for the created namespace")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(c.Fd), &st); err != nil || st.Ino != ino {
		t.Fatalf("cached descriptor is net:[%d] (%v), the mounted namespace is net:[%d]", st.Ino, err, ino)
	}
	lo, err := c.NH.LinkByName("lo")
	if err != nil || lo.Attrs().Alias != o.Marker() {
		t.Fatalf("cached socket sees lo %+v (%v), want the node's marker", lo, err)
	}
	host, err := vnetns.GetFromPath("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	var hst unix.Stat_t
	if err := unix.Fstat(int(host), &hst); err != nil || hst.Ino == ino {
		t.Fatalf("process namespace net:[%d] (%v) is the node's", hst.Ino, err)
	}
}

// TestSidecarAppendSurvivesTornTails (unit): an update appends to the sidecar; an earlier
// version's sidecar (one record, no newline) is read and appended to; a torn append (a cut
// record, or the zeros a power loss can leave past the last synced byte) is skipped by readers,
// which get the record before it, and cut off by the next append; a damaged whole record is an
// error, never skipped.
func TestSidecarAppendSurvivesTornTails(t *testing.T) {
	d := &Driver{StateDir: t.TempDir()}
	first := sidecar{Marker: "m", Netns: "sb-x-g1", HasCommand: true}
	started := first
	started.NsInode, started.Pid, started.StartTime = 7, 42, 99
	rec := func(s sidecar) []byte {
		b, err := durable.EncodeRecord(sidecarKind, 1, s)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	path := d.sidecarPath(first.Netns)
	read := func() sidecar {
		t.Helper()
		s, err := d.readSidecar(first.Netns)
		if err != nil {
			t.Fatalf("readSidecar: %v", err)
		}
		return s
	}
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"earlier version, no newline", rec(first)},
		{"this version", append(rec(first), '\n')},
		{"torn append", append(append(rec(first), '\n'), rec(started)[:40]...)},
		{"zeros past the synced end", append(append(rec(first), '\n'), make([]byte, 300)...)},
	} {
		if err := os.WriteFile(path, tc.file, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != first {
			t.Errorf("%s: read %+v, want the first record", tc.name, got)
		}
		if err := d.appendSidecar(started); err != nil {
			t.Fatalf("%s: appendSidecar: %v", tc.name, err)
		}
		if got := read(); got != started {
			t.Errorf("%s: after append read %+v, want %+v", tc.name, got, started)
		}
		b, _ := os.ReadFile(path)
		if want := string(rec(first)) + "\n" + string(rec(started)) + "\n"; string(b) != want {
			t.Errorf("%s: file after append:\n%q\nwant\n%q", tc.name, b, want)
		}
	}
	bad := append(append(rec(first)[:30], '\n'), append(rec(started), '\n')...)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := d.readSidecar(first.Netns); err == nil {
		t.Errorf("damaged whole record skipped: read %+v", s)
	}
}

// TestKernelStartNodeAppendsToTheSidecar (kernel tier): starting a node updates its sidecar in
// place (the file CreateNode wrote, same inode: no temporary file, no rename), and the record
// read back names the running main process.
func TestKernelStartNodeAppendsToTheSidecar(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	o := l.owner("sysbox_node", "sysbox_node.a")
	spec := substrate.NodeSpec{Owner: o, Driver: Name, Command: []string{l.busybox, "sleep", "3600"}}
	h, err := l.d.CreateNode(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer l.destroy([]*testNode{{h: h, owner: o}})
	path := l.d.sidecarPath(h.ExternalID)
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.d.StartNode(ctx, h, spec); err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("StartNode replaced the sidecar file instead of appending to it")
	}
	sc, err := l.d.readSidecar(h.ExternalID)
	if err != nil || sc.Pid == 0 || !processAlive(sc.Pid, sc.StartTime, sc.NsInode) {
		t.Fatalf("sidecar after start: %+v, %v; want the running main process", sc, err)
	}
	if err := l.d.StopNode(ctx, h, o); err != nil {
		t.Fatal(err)
	}
	if sc, err := l.d.readSidecar(h.ExternalID); err != nil || !sc.Stopped {
		t.Fatalf("sidecar after stop: %+v, %v; want stopped", sc, err)
	}
}
