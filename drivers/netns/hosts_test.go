package netns

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestKernelHostsResolveAliases (kernel tier): two nodes whose hosts files list each other's
// aliases ping each other by name — from exec and as seen by the main process — a changed
// alias set is visible at once to the running main process, the host's /etc/hosts is never
// touched, a stranger's owner cannot write a node's hosts, and deleting the nodes leaves no
// hosts file (a left-over one is residue).
func TestKernelHostsResolveAliases(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	hostBefore, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	nh, no := l.network("sysbox_network.lan", "198.51.100.0/24")
	ips := map[string]string{"a": "198.51.100.31", "b": "198.51.100.32"}
	entries := []driver.HostEntry{{Address: ips["a"], Names: []string{"alpha"}}, {Address: ips["b"], Names: []string{"beta", "bee"}}}
	var nodes []*testNode
	for i, name := range []string{"a", "b"} {
		o := l.owner("sysbox_node", "sysbox_node."+name)
		spec := substrate.NodeSpec{Owner: o, Driver: Name, Command: []string{l.busybox, "sleep", "3600"}}
		h, err := l.d.CreateNode(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		n := &testNode{h: h, owner: o, spec: spec}
		nodes = append(nodes, n)
		st, err := l.d.Attach(ctx, h, substrate.AttachmentSpec{Owner: o, Node: o.Address, Name: "lan", Network: nh,
			IPv4: []string{ips[name] + "/24"}, MAC: "02:00:c6:33:64:" + []string{"1f", "20"}[i]})
		if err != nil {
			t.Fatal(err)
		}
		n.atts = []substrate.AttachmentState{st}
		if err := l.d.SetHosts(ctx, h, o, entries); err != nil {
			t.Fatalf("SetHosts(%s): %v", o.Address, err)
		}
		if err := l.d.ConfigureGuestNetwork(ctx, h, n.atts, nil); err != nil {
			t.Fatal(err)
		}
		if err := l.d.StartNode(ctx, h, spec); err != nil {
			t.Fatal(err)
		}
	}
	a, b := nodes[0], nodes[1]
	// a's main process started before b's namespace was mounted; as a slave copy of the
	// namespaces directory its mount namespace would have received that mount (and one per
	// later node: O(N) kernel work per node create and delete).
	if got := mountsUnder(t, observePid(t, l, a), l.d.NetnsDir); len(got) != 0 {
		t.Errorf("mount namespace of a's main process holds %v under %s, want none", got, l.d.NetnsDir)
	}
	if !isNetnsMount(l.d.nsPath(b.h.ExternalID)) {
		t.Fatalf("b's namespace is not mounted on the host at %s", l.d.nsPath(b.h.ExternalID))
	}
	for _, c := range []struct {
		from *testNode
		to   string
	}{{a, "beta"}, {a, "bee"}, {b, "alpha"}, {a, "alpha"}} {
		if !l.ping(c.from, c.to) {
			t.Errorf("ping %s from %s by alias: failed\n/etc/hosts inside: %s", c.to, c.from.owner.Address, l.exec(c.from, "cat", "/etc/hosts").Stdout)
		}
	}
	mainHosts := func(n *testNode) string {
		b, err := os.ReadFile("/proc/" + observePid(t, l, n) + "/root/etc/hosts")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := mainHosts(b); !strings.Contains(got, ips["a"]+"\talpha\n") {
		t.Errorf("main process of b: /etc/hosts lacks alpha:\n%s", got)
	}
	// Aliases change: the running main process sees the new set, the old name is gone.
	entries[0].Names = []string{"gamma"}
	for _, n := range nodes {
		if err := l.d.SetHosts(ctx, n.h, n.owner, entries); err != nil {
			t.Fatal(err)
		}
	}
	if got := mainHosts(b); !strings.Contains(got, ips["a"]+"\tgamma\n") || strings.Contains(got, "alpha") {
		t.Errorf("main process of b after the change: got\n%s\nwant gamma, not alpha", got)
	}
	if !l.ping(b, "gamma") || l.ping(b, "alpha") {
		t.Errorf("after the change: gamma must resolve from b and alpha must not")
	}
	if hostAfter, _ := os.ReadFile("/etc/hosts"); string(hostAfter) != string(hostBefore) {
		t.Fatalf("the host's /etc/hosts changed:\n%s", hostAfter)
	}
	stranger := a.owner
	stranger.Address = "sysbox_node.z"
	if err := l.d.SetHosts(ctx, a.h, stranger, entries); err == nil {
		t.Errorf("SetHosts by another resource: got nil, want refused")
	}
	// A hosts file whose namespace is gone is residue, named with its owner.
	leftover := l.d.hostsPath("sb-leftover-" + l.topology[5:11])
	if err := os.WriteFile(leftover, []byte("# sysbox owner "+a.owner.Marker()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(l.residue(), func(o substrate.Object) bool { return o.Kind == "netns-hosts" && o.ExternalID == leftover }) {
		t.Errorf("residue lacks the left-over hosts file %s: %+v", leftover, l.residue())
	}
	// One whose owner cannot be read (no owner line: a stranger's, or a kill right after its
	// creation) fails the audit instead of passing it.
	if err := os.WriteFile(leftover, []byte("127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if objs, err := l.d.Residue(ctx, l.topology); err == nil || !strings.Contains(err.Error(), leftover) {
		t.Errorf("residue with an unattributable hosts file: %+v, %v; want an error naming %s", objs, err, leftover)
	}
	_ = os.Remove(leftover)
	for _, n := range nodes {
		if _, err := os.Stat(l.d.hostsPath(n.h.ExternalID)); err != nil {
			t.Fatalf("hosts file of %s before DeleteNode: %v", n.owner.Address, err)
		}
	}
	l.destroy(nodes, testNet{nh, no})
	for _, n := range nodes {
		if _, err := os.Stat(l.d.hostsPath(n.h.ExternalID)); !os.IsNotExist(err) {
			t.Errorf("hosts file of %s after DeleteNode: %v, want gone", n.owner.Address, err)
		}
	}
	if objs := l.residue(); len(objs) > 0 {
		t.Errorf("residue after destroy: %+v", objs)
	}
}

// mountsUnder lists the mount points below dir in the mount namespace of process pid.
func mountsUnder(t *testing.T, pid, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}
