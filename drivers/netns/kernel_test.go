package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// lab is a throwaway topology for kernel-tier tests: a random topology id whose residue is
// removed in t.Cleanup even when the test fails.
type lab struct {
	t        *testing.T
	d        *Driver
	topology string
	busybox  string
}

func newLab(t *testing.T) *lab {
	t.Helper()
	testenv.RequireRoot(t)
	bb := testenv.RequireBinary(t, "busybox")
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	l := &lab{t: t, d: New(), topology: "test-" + hex.EncodeToString(b), busybox: bb}
	t.Cleanup(func() { ScrubTopology(context.Background(), l.d, l.topology) })
	return l
}

// ScrubTopology removes topology's residue (Driver.Scrub), ignoring errors. Test clean-up only.
func ScrubTopology(ctx context.Context, d *Driver, topology string) { _ = d.Scrub(ctx, topology) }

func (l *lab) owner(typ, addr string) substrate.Owner {
	return substrate.Owner{Topology: l.topology, Address: addr, Type: typ, Generation: 1}
}

func (l *lab) network(addr, cidr string) (substrate.Handle, substrate.Owner) {
	l.t.Helper()
	o := l.owner("sysbox_network", addr)
	h, err := l.d.CreateNetwork(context.Background(), substrate.NetworkSpec{Owner: o, IPv4CIDR: cidr})
	if err != nil {
		l.t.Fatalf("CreateNetwork(%s): %v", addr, err)
	}
	return h, o
}

type testNode struct {
	h     substrate.Handle
	owner substrate.Owner
	spec  substrate.NodeSpec
	atts  []substrate.AttachmentState
	aspec []substrate.AttachmentSpec
}

func (l *lab) node(addr string, command []string, atts ...substrate.AttachmentSpec) *testNode {
	l.t.Helper()
	ctx := context.Background()
	o := l.owner("sysbox_node", addr)
	spec := substrate.NodeSpec{Owner: o, Driver: Name, Command: command}
	h, err := l.d.CreateNode(ctx, spec)
	if err != nil {
		l.t.Fatalf("CreateNode(%s): %v", addr, err)
	}
	n := &testNode{h: h, owner: o, spec: spec}
	l.wire(n, atts)
	return n
}

// wire attaches, configures and starts n (used for first creation and for a reset).
func (l *lab) wire(n *testNode, atts []substrate.AttachmentSpec) {
	l.t.Helper()
	ctx := context.Background()
	n.atts, n.aspec = nil, nil
	for _, a := range atts {
		a.Owner, a.Node = n.owner, n.owner.Address
		st, err := l.d.Attach(ctx, n.h, a)
		if err != nil {
			l.t.Fatalf("Attach(%s, %s): %v", n.owner.Address, a.Name, err)
		}
		n.atts = append(n.atts, st)
		n.aspec = append(n.aspec, a)
	}
	if err := l.d.ConfigureGuestNetwork(ctx, n.h, n.atts, nil); err != nil {
		l.t.Fatalf("ConfigureGuestNetwork(%s): %v", n.owner.Address, err)
	}
	if err := l.d.StartNode(ctx, n.h, n.spec); err != nil {
		l.t.Fatalf("StartNode(%s): %v", n.owner.Address, err)
	}
}

func (l *lab) exec(n *testNode, argv ...string) substrate.ExecResult {
	l.t.Helper()
	res, err := l.d.Exec(context.Background(), n.h, substrate.ExecRequest{Argv: argv, Timeout: 20 * time.Second})
	if err != nil {
		l.t.Fatalf("Exec(%s, %v): %v", n.owner.Address, argv, err)
	}
	return res
}

func (l *lab) ping(from *testNode, to string) bool {
	l.t.Helper()
	return l.exec(from, l.busybox, "ping", "-c", "1", "-W", "2", to).ExitCode == 0
}

func (l *lab) residue() []substrate.Object {
	l.t.Helper()
	objs, err := l.d.Residue(context.Background(), l.topology)
	if err != nil {
		l.t.Fatalf("Residue: %v", err)
	}
	return objs
}

type testNet struct {
	h     substrate.Handle
	owner substrate.Owner
}

func (l *lab) destroy(nodes []*testNode, nets ...testNet) {
	l.t.Helper()
	ctx := context.Background()
	for _, n := range nodes {
		for _, a := range n.atts {
			if err := l.d.Detach(ctx, n.h, a, n.owner); err != nil {
				l.t.Errorf("Detach(%s, %s): %v", n.owner.Address, a.Name, err)
			}
		}
		if err := l.d.DeleteNode(ctx, n.h, n.owner); err != nil {
			l.t.Errorf("DeleteNode(%s): %v", n.owner.Address, err)
		}
	}
	for _, n := range nets {
		if err := l.d.DeleteNetwork(ctx, n.h, n.owner); err != nil {
			l.t.Errorf("DeleteNetwork(%s): %v", n.owner.Address, err)
		}
	}
}

func TestKernelTrafficObserveAndDestroy(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	net1, netOwner := l.network("sysbox_network.lan", "198.51.100.0/24")
	a := l.node("sysbox_node.a", []string{"sleep", "1000"}, substrate.AttachmentSpec{Name: "lan", Network: net1, IPv4: []string{"198.51.100.10/24"}})
	b := l.node("sysbox_node.b", nil, substrate.AttachmentSpec{Name: "lan", Network: net1, IPv4: []string{"198.51.100.11/24"}, MAC: "02:00:00:00:00:0b"})

	if !l.ping(a, "198.51.100.11") || !l.ping(b, "198.51.100.10") {
		t.Fatalf("ping between nodes on one bridge failed")
	}
	// Bridged IPv6 still flows with IPv6 off on the bridge ports (the host ends): a reaches b's
	// link-local address once duplicate address detection has let both use theirs.
	bLL := linkLocal(t, l, b, "lan")
	for deadline := time.Now().Add(20 * time.Second); l.exec(a, l.busybox, "ping6", "-c", "1", "-W", "1", "-I", "lan", bLL).ExitCode != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("ping6 -I lan %s from a: no reply within 20 s", bLL)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got, want := a.atts[0].MAC, linuxnet.DefaultMAC("sysbox_node.a", "lan").String(); got != want {
		t.Errorf("default MAC: got %s, want %s", got, want)
	}
	if got := l.exec(b, l.busybox, "ip", "link", "show", "lan").Stdout; !strings.Contains(string(got), "02:00:00:00:00:0b") {
		t.Errorf("declared MAC inside node: got %q, want it to contain 02:00:00:00:00:0b", got)
	}

	obs, err := l.d.ObserveNode(ctx, a.h, a.owner)
	if err != nil || obs.Status != substrate.Present || obs.Attributes["pid"] == "" {
		t.Errorf("ObserveNode(a): got %+v, %v; want present with a pid", obs, err)
	}
	for _, n := range []*testNode{a, b} {
		obs, err := l.d.ObserveAttachment(ctx, n.h, n.atts[0], n.owner)
		if err != nil || obs.Status != substrate.Present {
			t.Errorf("ObserveAttachment(%s): got %+v, %v; want present", n.owner.Address, obs, err)
		}
	}
	obs, err = l.d.ObserveNetwork(ctx, net1, netOwner)
	if err != nil || obs.Status != substrate.Present {
		t.Errorf("ObserveNetwork: got %+v, %v; want present", obs, err)
	}

	// Another owner's anchors never prove ownership.
	other := a.owner
	other.Generation = 2
	if err := l.d.DeleteNode(ctx, a.h, other); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("DeleteNode with another generation's owner: got %v, want ErrNotOwned", err)
	}
	if obs, _ := l.d.ObserveNode(ctx, a.h, other); obs.Status != substrate.Drifted {
		t.Errorf("ObserveNode with another owner: got %s, want drifted", obs.Status)
	}

	// The main process dying is visible.
	if err := l.d.StopNode(ctx, a.h, a.owner); err != nil {
		t.Fatalf("StopNode: %v", err)
	}
	if obs, _ := l.d.ObserveNode(ctx, a.h, a.owner); obs.Status != substrate.Degraded {
		t.Errorf("ObserveNode after StopNode: got %s (%s), want degraded", obs.Status, obs.Reason)
	}
	if err := l.d.StartNode(ctx, a.h, a.spec); err != nil {
		t.Fatalf("StartNode again: %v", err)
	}
	if obs, _ := l.d.ObserveNode(ctx, a.h, a.owner); obs.Status != substrate.Present {
		t.Errorf("ObserveNode after restart: got %s (%s), want present", obs.Status, obs.Reason)
	}

	if n := len(l.residue()); n == 0 {
		t.Fatalf("residue before destroy: got none, want the lab's objects")
	}
	l.destroy([]*testNode{a, b}, testNet{net1, netOwner})
	if objs := l.residue(); len(objs) != 0 {
		t.Errorf("residue after destroy: got %+v, want none", objs)
	}
	if obs, err := l.d.ObserveNode(ctx, a.h, a.owner); err != nil || obs.Status != substrate.Absent {
		t.Errorf("ObserveNode after delete: got %+v, %v; want absent", obs, err)
	}
	if obs, err := l.d.ObserveNetwork(ctx, net1, netOwner); err != nil || obs.Status != substrate.Absent {
		t.Errorf("ObserveNetwork after delete: got %+v, %v; want absent", obs, err)
	}
}

func TestKernelBridgeTrafficWithDockerForwardDrop(t *testing.T) {
	l := newLab(t)
	has, err := linuxnet.HostForwardFilter()
	if err != nil {
		t.Fatal(err)
	}
	testenv.Require(t, has, "no ip filter FORWARD chain in the host namespace (start dockerd to test coexistence with its FORWARD DROP)")
	ctx := context.Background()
	net1, netOwner := l.network("sysbox_network.dmz", "203.0.113.0/24")
	a := l.node("sysbox_node.a", nil, substrate.AttachmentSpec{Name: "dmz", Network: net1, IPv4: []string{"203.0.113.10/24"}})
	b := l.node("sysbox_node.b", nil, substrate.AttachmentSpec{Name: "dmz", Network: net1, IPv4: []string{"203.0.113.11/24"}})
	if !l.ping(a, "203.0.113.11") {
		t.Fatalf("ping across our bridge with the host FORWARD chain present failed")
	}
	rules, err := linuxnet.ForwardRules()
	if err != nil {
		t.Fatal(err)
	}
	if n := countOwned(rules, netOwner); n != 1 {
		t.Fatalf("forward accept rules for the bridge: got %d, want 1", n)
	}
	obs, _ := l.d.ObserveNetwork(ctx, net1, netOwner)
	if obs.Attributes["forward_accept_rule"] != "true" {
		t.Errorf("ObserveNetwork attributes: got %v, want forward_accept_rule=true", obs.Attributes)
	}
	// Someone removes the rule: the network is degraded, traffic stops; re-creating restores it.
	if err := linuxnet.RemoveForwardAccept(net1.ExternalID, netOwner); err != nil {
		t.Fatal(err)
	}
	if obs, _ := l.d.ObserveNetwork(ctx, net1, netOwner); obs.Status != substrate.Degraded {
		t.Errorf("ObserveNetwork without the rule: got %s, want degraded", obs.Status)
	}
	if l.ping(a, "203.0.113.11") {
		t.Errorf("ping without the accept rule: got through, want dropped by the host FORWARD policy (is the test meaningful?)")
	}
	if _, err := l.d.CreateNetwork(ctx, substrate.NetworkSpec{Owner: netOwner}); err != nil {
		t.Fatalf("CreateNetwork again (adopt): %v", err)
	}
	if !l.ping(a, "203.0.113.11") {
		t.Errorf("ping after re-creating the network: failed")
	}
	l.destroy([]*testNode{a, b}, testNet{net1, netOwner})
	rules, _ = linuxnet.ForwardRules()
	if n := countOwned(rules, netOwner); n != 0 {
		t.Errorf("forward accept rules after destroy: got %d, want 0", n)
	}
}

func countOwned(rules []linuxnet.ForwardRule, o substrate.Owner) int {
	n := 0
	for _, r := range rules {
		if r.Owner.Equal(o) {
			n++
		}
	}
	return n
}

func TestKernelResetKeepsAddressesAndSparesNeighbours(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	net1, netOwner := l.network("sysbox_network.lan", "198.18.0.0/24")
	att := func(ip string) substrate.AttachmentSpec {
		return substrate.AttachmentSpec{Name: "lan", Network: net1, IPv4: []string{ip + "/24"}}
	}
	a := l.node("sysbox_node.a", []string{"sleep", "1000"}, att("198.18.0.1"))
	b := l.node("sysbox_node.b", []string{"sleep", "1000"}, att("198.18.0.2"))
	c := l.node("sysbox_node.c", []string{"sleep", "1000"}, att("198.18.0.3"))
	if !l.ping(a, "198.18.0.3") {
		t.Fatal("ping c before reset failed")
	}
	bPid := observePid(t, l, b)

	// a pings b continuously while c is reset.
	var wg sync.WaitGroup
	var bg substrate.ExecResult
	wg.Add(1)
	go func() {
		defer wg.Done()
		bg, _ = l.d.Exec(ctx, a.h, substrate.ExecRequest{Argv: []string{l.busybox, "ping", "-c", "30", "-i", "0.1", "-W", "5", "198.18.0.2"}, Timeout: 30 * time.Second})
	}()

	prior, priorOwner, priorAtts := c.h, c.owner, c.atts
	next := c.owner
	next.Generation = 2
	spec := c.spec
	spec.Owner = next
	h, err := l.d.NewGeneration(ctx, prior, priorOwner, spec)
	if err != nil {
		t.Fatalf("NewGeneration: %v", err)
	}
	c.h, c.owner, c.spec = h, next, spec
	l.wire(c, []substrate.AttachmentSpec{att("198.18.0.3")})
	for _, a := range priorAtts {
		if err := l.d.Detach(ctx, prior, a, priorOwner); err != nil {
			t.Errorf("Detach prior: %v", err)
		}
	}
	if err := l.d.DeleteNode(ctx, prior, priorOwner); err != nil {
		t.Fatalf("DeleteNode(prior): %v", err)
	}
	wg.Wait()

	if h.ExternalID == prior.ExternalID {
		t.Errorf("external id after reset: got %s, want a new one", h.ExternalID)
	}
	if got, want := c.atts[0].MAC, priorAtts[0].MAC; got != want {
		t.Errorf("MAC after reset: got %s, want %s", got, want)
	}
	if out := string(l.exec(c, l.busybox, "ip", "-4", "addr", "show", "lan").Stdout); !strings.Contains(out, "198.18.0.3/24") {
		t.Errorf("address after reset: got %q, want 198.18.0.3/24", out)
	}
	if !l.ping(a, "198.18.0.3") {
		t.Errorf("ping c after reset failed")
	}
	if got := observePid(t, l, b); got != bPid {
		t.Errorf("neighbour b's main process: got pid %s, want %s unchanged", got, bPid)
	}
	if bg.ExitCode != 0 || !strings.Contains(string(bg.Stdout), "30 packets received") {
		t.Errorf("a→b traffic during the reset: got exit %d, %q; want all 30 replies", bg.ExitCode, bg.Stdout)
	}
	if obs, _ := l.d.ObserveNode(ctx, prior, priorOwner); obs.Status != substrate.Absent {
		t.Errorf("prior generation after cleanup: got %s, want absent", obs.Status)
	}
	l.destroy([]*testNode{a, b, c}, testNet{net1, netOwner})
	if objs := l.residue(); len(objs) != 0 {
		t.Errorf("residue after destroy: got %+v, want none", objs)
	}
}

// linkLocal waits (bounded) for the IPv6 link-local address of interface ifname inside n.
func linkLocal(t *testing.T, l *lab, n *testNode, ifname string) string {
	t.Helper()
	ns, err := l.d.NodeNetns(context.Background(), n.h)
	if err != nil {
		t.Fatal(err)
	}
	nh, err := ns.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		link, err := nh.LinkByName(ifname)
		if err != nil {
			t.Fatal(err)
		}
		addrs, err := nh.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() {
				return a.IP.String()
			}
		}
	}
	t.Fatalf("%s in %s: no IPv6 link-local address within 10 s", ifname, n.owner.Address)
	return ""
}

func observePid(t *testing.T, l *lab, n *testNode) string {
	t.Helper()
	obs, err := l.d.ObserveNode(context.Background(), n.h, n.owner)
	if err != nil || obs.Status != substrate.Present {
		t.Fatalf("ObserveNode(%s): got %+v, %v; want present", n.owner.Address, obs, err)
	}
	return obs.Attributes["pid"]
}

func TestKernelForeignObjectsWithCollidingNamesAreNeverDeleted(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	netOwner := l.owner("sysbox_network", "sysbox_network.lan")
	brName := BridgeName(netOwner)
	foreign := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: brName, TxQLen: -1}}
	if err := netlink.LinkAdd(foreign); err != nil {
		t.Fatalf("create foreign bridge: %v", err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(foreign) })
	if _, err := l.d.CreateNetwork(ctx, substrate.NetworkSpec{Owner: netOwner}); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("CreateNetwork over a foreign bridge: got %v, want ErrNotOwned", err)
	}
	h := substrate.Handle{Driver: Name, ExternalID: brName, Private: encode(private{Kind: kindNetwork, Bridge: brName})}
	if err := l.d.DeleteNetwork(ctx, h, netOwner); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("DeleteNetwork of a foreign bridge: got %v, want ErrNotOwned", err)
	}
	if obs, _ := l.d.ObserveNetwork(ctx, h, netOwner); obs.Status != substrate.Drifted {
		t.Errorf("ObserveNetwork of a foreign bridge: got %s, want drifted", obs.Status)
	}
	if _, err := netlink.LinkByName(brName); err != nil {
		t.Errorf("foreign bridge after refusals: %v, want it still there", err)
	}

	nodeOwner := l.owner("sysbox_node", "sysbox_node.a")
	nsName := NetnsName(nodeOwner)
	if err := createNamedNetns(l.d.nsPath(nsName), nil); err != nil {
		t.Fatalf("create foreign netns: %v", err)
	}
	t.Cleanup(func() { _ = removeNamedNetns(l.d.nsPath(nsName)) })
	if _, err := l.d.CreateNode(ctx, substrate.NodeSpec{Owner: nodeOwner}); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("CreateNode over a foreign namespace: got %v, want ErrNotOwned", err)
	}
	nh := substrate.Handle{Driver: Name, ExternalID: nsName, Private: encode(private{Kind: kindNode, Netns: nsName})}
	if err := l.d.DeleteNode(ctx, nh, nodeOwner); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("DeleteNode of a foreign namespace: got %v, want ErrNotOwned", err)
	}
	if !isNetnsMount(l.d.nsPath(nsName)) {
		t.Errorf("foreign namespace after refusals: gone, want it still mounted")
	}
}

func TestKernelImportClaimsOnlyUnmarkedOrSameResource(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	name := "sbtest-imp-" + l.topology[5:11]
	path := l.d.nsPath(name)
	if err := createNamedNetns(path, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = removeNamedNetns(path); l.d.removeFiles(name) })
	o := l.owner("sysbox_node", "sysbox_node.imported")
	imp, err := l.d.ImportNode(ctx, name, o)
	if err != nil {
		t.Fatalf("ImportNode(unmarked): %v", err)
	}
	if obs, err := l.d.ObserveNode(ctx, imp.Handle, o); err != nil || obs.Status != substrate.Present {
		t.Errorf("ObserveNode(imported): got %+v, %v; want present", obs, err)
	}
	if _, err := l.d.ImportNode(ctx, name, l.owner("sysbox_node", "sysbox_node.other")); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("ImportNode by another resource: got %v, want ErrNotOwned", err)
	}
	again := o
	again.Generation = 4
	if _, err := l.d.ImportNode(ctx, name, again); err != nil {
		t.Errorf("ImportNode by the same resource: got %v, want nil", err)
	}
	if _, err := l.d.ImportNode(ctx, "sbtest-missing-"+l.topology[5:9], o); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("ImportNode(missing): got %v, want ErrNotFound", err)
	}
	if err := l.d.DeleteNode(ctx, imp.Handle, again); err != nil {
		t.Errorf("DeleteNode(imported): %v", err)
	}
	if objs := l.residue(); slices.ContainsFunc(objs, func(o substrate.Object) bool { return o.ExternalID == name }) {
		t.Errorf("residue after deleting the imported node: got %+v", objs)
	}
}

var _ = fmt.Sprint

func TestKernelHostnameInOwnUTSNamespace(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	o := l.owner("sysbox_node", "sysbox_node.named")
	spec := substrate.NodeSpec{Owner: o, Hostname: "web-1", Command: []string{"sleep", "1000"}}
	h, err := l.d.CreateNode(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{h: h, owner: o, spec: spec}
	if err := l.d.StartNode(ctx, h, spec); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(l.exec(n, l.busybox, "hostname").Stdout)); got != "web-1" {
		t.Errorf("hostname inside: got %q, want web-1", got)
	}
	pid := observePid(t, l, n)
	mainUTS, _ := os.Readlink("/proc/" + pid + "/ns/uts")
	hostUTS, _ := os.Readlink("/proc/self/ns/uts")
	if mainUTS == hostUTS {
		t.Errorf("main process UTS namespace: got the host's %s, want its own", mainUTS)
	}
	if self, _ := os.Hostname(); self == "web-1" {
		t.Errorf("the host's hostname changed to web-1")
	}
	l.destroy([]*testNode{n})
	if _, err := os.Stat(l.d.utsPath(h.ExternalID)); !os.IsNotExist(err) {
		t.Errorf("uts bind mount after delete: %v, want gone", err)
	}
}
