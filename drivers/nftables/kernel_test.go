package nftables_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	nft "github.com/google/nftables"
	"github.com/google/nftables/expr"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/drivers/nftables"
	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

type node struct {
	h     substrate.Handle
	owner substrate.Owner
	atts  []substrate.AttachmentState
}

type env struct {
	t        *testing.T
	nodes    *netns.Driver
	pol      *nftables.Driver
	topology string
	busybox  string
	cleanup  []func()
}

func newEnv(t *testing.T) *env {
	testenv.RequireRoot(t)
	bb := testenv.RequireBinary(t, "busybox")
	reg := driver.NewRegistry()
	nd := netns.New()
	if err := reg.Register(nd); err != nil {
		t.Fatal(err)
	}
	pd := nftables.New(reg)
	if err := reg.Register(pd); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	e := &env{t: t, nodes: nd, pol: pd, topology: "test-" + hex.EncodeToString(b), busybox: bb}
	t.Cleanup(func() {
		for i := len(e.cleanup) - 1; i >= 0; i-- {
			e.cleanup[i]()
		}
	})
	return e
}

func (e *env) owner(typ, addr string) substrate.Owner {
	return substrate.Owner{Topology: e.topology, Address: addr, Type: typ, Generation: 1}
}

func (e *env) network(addr string) substrate.Handle {
	ctx := context.Background()
	o := e.owner("sysbox_network", addr)
	h, err := e.nodes.CreateNetwork(ctx, substrate.NetworkSpec{Owner: o})
	if err != nil {
		e.t.Fatalf("CreateNetwork(%s): %v", addr, err)
	}
	e.cleanup = append(e.cleanup, func() {
		if err := e.nodes.DeleteNetwork(ctx, h, o); err != nil {
			e.t.Errorf("DeleteNetwork(%s): %v", addr, err)
		}
	})
	return h
}

func (e *env) node(addr string, command []string, routes []substrate.Route, atts ...substrate.AttachmentSpec) *node {
	ctx := context.Background()
	o := e.owner("sysbox_node", addr)
	spec := substrate.NodeSpec{Owner: o, Driver: netns.Name, Command: command}
	h, err := e.nodes.CreateNode(ctx, spec)
	if err != nil {
		e.t.Fatalf("CreateNode(%s): %v", addr, err)
	}
	n := &node{h: h, owner: o}
	e.cleanup = append(e.cleanup, func() {
		if err := e.nodes.DeleteNode(ctx, h, o); err != nil {
			e.t.Errorf("DeleteNode(%s): %v", addr, err)
		}
	})
	for _, a := range atts {
		a.Owner, a.Node = o, addr
		st, err := e.nodes.Attach(ctx, h, a)
		if err != nil {
			e.t.Fatalf("Attach(%s, %s): %v", addr, a.Name, err)
		}
		n.atts = append(n.atts, st)
	}
	if err := e.nodes.ConfigureGuestNetwork(ctx, h, n.atts, routes); err != nil {
		e.t.Fatalf("ConfigureGuestNetwork(%s): %v", addr, err)
	}
	if err := e.nodes.StartNode(ctx, h, spec); err != nil {
		e.t.Fatalf("StartNode(%s): %v", addr, err)
	}
	return n
}

func (e *env) run(n *node, argv ...string) substrate.ExecResult {
	res, err := e.nodes.Exec(context.Background(), n.h, substrate.ExecRequest{Argv: argv, Timeout: 20 * time.Second})
	if err != nil {
		e.t.Fatalf("Exec(%s, %v): %v", n.owner.Address, argv, err)
	}
	return res
}

// fetch GETs url from a node once; the 3 s bound a dropped connection.
func (e *env) fetch(from *node, url string) (string, bool) {
	return e.fetchWithin(from, url, 3*time.Second)
}

// fetchOK GETs url from a node until it answers, for up to 30 s: a started httpd is not yet
// listening, and a loaded host can stall a try past the 3 s that bound a dropped connection.
func (e *env) fetchOK(from *node, url string) (string, bool) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		body, ok := e.fetchWithin(from, url, 10*time.Second)
		if ok || time.Now().After(deadline) {
			return body, ok
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *env) fetchWithin(from *node, url string, timeout time.Duration) (string, bool) {
	// busybox 1.35's wget crashes with -T; the exec timeout bounds it instead.
	res, err := e.nodes.Exec(context.Background(), from.h, substrate.ExecRequest{Argv: []string{e.busybox, "wget", "-q", "-O", "-", url}, Timeout: timeout})
	if errors.Is(err, argv.ErrTimeout) {
		return "", false
	}
	if err != nil {
		e.t.Fatalf("Exec(%s, wget %s): %v", from.owner.Address, url, err)
	}
	return string(res.Stdout), res.ExitCode == 0
}

// TestKernelQuickstartPolicies builds the quickstart lab (client — router — server) and checks
// that NAT works and the server's firewall lets exactly TCP 8080 from the router's address in.
func TestKernelQuickstartPolicies(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	www := t.TempDir()
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte("hello from server\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lan, dmz := e.network("sysbox_network.lan"), e.network("sysbox_network.dmz")
	client := e.node("sysbox_node.client", []string{"sleep", "1000"}, nil,
		substrate.AttachmentSpec{Name: "lan", Network: lan, IPv4: []string{"198.51.100.10/24"}, Gateway: "198.51.100.1"})
	router := e.node("sysbox_node.router", nil, nil,
		substrate.AttachmentSpec{Name: "lan", Network: lan, IPv4: []string{"198.51.100.1/24"}},
		substrate.AttachmentSpec{Name: "dmz", Network: dmz, IPv4: []string{"203.0.113.1/24"}})
	server := e.node("sysbox_node.server", []string{e.busybox, "httpd", "-f", "-p", "8080", "-h", www}, nil,
		substrate.AttachmentSpec{Name: "dmz", Network: dmz, IPv4: []string{"203.0.113.10/24"}, Gateway: "203.0.113.1"})
	// A second listener on a port the firewall must block.
	if res := e.run(server, e.busybox, "httpd", "-p", "9090", "-h", www); res.ExitCode != 0 {
		t.Fatalf("start httpd on 9090: %s", res.Stderr)
	}

	if _, ok := e.fetch(client, "http://203.0.113.10:8080/"); ok {
		t.Fatalf("client reached server before the router forwards: want no route through a non-forwarding router")
	}

	routerSpec := substrate.PolicySpec{Owner: e.owner("sysbox_router", "sysbox_router.edge"), Router: &substrate.Router{
		Masquerade:   []substrate.Masquerade{{OutAttachment: "dmz", Source: "198.51.100.0/24"}},
		PortForwards: []substrate.PortForward{{InAttachment: "lan", Protocol: "tcp", Port: 8081, To: "203.0.113.10:8080"}},
	}}
	rh, err := e.pol.ApplyPolicy(ctx, router.h, router.atts, routerSpec)
	if err != nil {
		t.Fatalf("ApplyPolicy(router): %v", err)
	}
	e.cleanup = append(e.cleanup, func() { _ = e.pol.DeletePolicy(ctx, router.h, rh, routerSpec.Owner) })

	// Only the router's (masqueraded) address may reach 8080; nothing else new gets in.
	fwSpec := substrate.PolicySpec{Owner: e.owner("sysbox_firewall", "sysbox_firewall.server"), Firewall: &substrate.Firewall{
		DefaultInput: "drop", DefaultForward: "drop", DefaultOutput: "accept",
		Rules: []substrate.Rule{{Chain: "input", Action: "accept", Protocol: "tcp", Source: "203.0.113.1/32", DestinationPort: 8080, Attachment: "dmz"}},
	}}
	fh, err := e.pol.ApplyPolicy(ctx, server.h, server.atts, fwSpec)
	if err != nil {
		t.Fatalf("ApplyPolicy(firewall): %v", err)
	}
	e.cleanup = append(e.cleanup, func() { _ = e.pol.DeletePolicy(ctx, server.h, fh, fwSpec.Owner) })

	for _, tc := range []struct {
		name string
		url  string
		want bool
	}{
		{"8080 through the router, masqueraded", "http://203.0.113.10:8080/", true},
		{"port forward on the router", "http://198.51.100.1:8081/", true},
		{"9090 blocked by the firewall", "http://203.0.113.10:9090/", false},
	} {
		fetch := e.fetch
		if tc.want {
			fetch = e.fetchOK
		}
		body, ok := fetch(client, tc.url)
		if ok != tc.want || (ok && !strings.Contains(body, "hello from server")) {
			t.Errorf("%s: got ok=%v body=%q, want ok=%v", tc.name, ok, body, tc.want)
			diagnose(t, e, lan, dmz)
		}
	}
	if res := e.run(client, e.busybox, "ping", "-c", "1", "-W", "1", "203.0.113.10"); res.ExitCode == 0 {
		t.Errorf("ping to the server: got a reply, want ICMP dropped by default_input=drop")
	}
	if _, ok := e.fetchOK(router, "http://203.0.113.10:8080/"); !ok {
		t.Errorf("router itself to 8080: blocked, want allowed (source 203.0.113.1)")
	}

	// Observation is Present; a cross-check with the nft binary shows the marker and the rule.
	for name, c := range map[string]struct {
		n    *node
		h    substrate.Handle
		spec substrate.PolicySpec
	}{"router": {router, rh, routerSpec}, "firewall": {server, fh, fwSpec}} {
		obs, err := e.pol.ObservePolicy(ctx, c.n.h, c.h, c.n.atts, c.spec)
		if err != nil || obs.Status != substrate.Present {
			t.Errorf("ObservePolicy(%s): got %+v, %v; want present", name, obs, err)
		}
	}
	if nftBin, err := lookNft(); err == nil {
		res := e.run(server, nftBin, "list", "table", "ip", fh.ExternalID)
		out := string(res.Stdout)
		for _, want := range []string{"tcp dport 8080", "ip saddr 203.0.113.1", "policy drop", "ct state established,related", fwSpec.Owner.Marker()} {
			if !strings.Contains(out, want) {
				t.Errorf("nft list table: missing %q in\n%s", want, out)
			}
		}
	}

	// Someone edits the table: refresh reports drift; re-applying converges.
	tamper(t, e, server, fh.ExternalID)
	obs, err := e.pol.ObservePolicy(ctx, server.h, fh, server.atts, fwSpec)
	if err != nil || obs.Status != substrate.Drifted {
		t.Errorf("ObservePolicy after an edit: got %+v, %v; want drifted", obs, err)
	}
	if _, ok := e.fetchOK(client, "http://203.0.113.10:9090/"); !ok {
		t.Errorf("tamper did not take effect (test would prove nothing)")
	}
	if fh, err = e.pol.ApplyPolicy(ctx, server.h, server.atts, fwSpec); err != nil {
		t.Fatalf("re-apply: %v", err)
	}
	if obs, _ := e.pol.ObservePolicy(ctx, server.h, fh, server.atts, fwSpec); obs.Status != substrate.Present {
		t.Errorf("ObservePolicy after re-apply: got %s (%s), want present", obs.Status, obs.Reason)
	}
	if _, ok := e.fetch(client, "http://203.0.113.10:9090/"); ok {
		t.Errorf("9090 after re-apply: reachable, want blocked again")
	}

	// Counters do not count as drift.
	for range 3 {
		e.fetch(client, "http://203.0.113.10:8080/")
	}
	if obs, _ := e.pol.ObservePolicy(ctx, server.h, fh, server.atts, fwSpec); obs.Status != substrate.Present {
		t.Errorf("ObservePolicy after traffic moved counters: got %s, want present", obs.Status)
	}

	// A changed declaration is drift too (same table, different meaning).
	changed := fwSpec
	changed.Firewall = &substrate.Firewall{DefaultInput: "drop", DefaultForward: "drop", Rules: []substrate.Rule{{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 8081}}}
	if obs, _ := e.pol.ObservePolicy(ctx, server.h, fh, server.atts, changed); obs.Status != substrate.Drifted {
		t.Errorf("ObservePolicy against a changed declaration: got %s, want drifted", obs.Status)
	}

	// Ownership: another owner never deletes or replaces the table.
	other := e.owner("sysbox_firewall", "sysbox_firewall.other")
	if err := e.pol.DeletePolicy(ctx, server.h, fh, other); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("DeletePolicy by another owner: got %v, want ErrNotOwned", err)
	}

	residue, err := e.pol.Residue(ctx, e.topology)
	if err != nil || len(residue) != 2 {
		t.Errorf("Residue with two policies applied: got %d objects (%v), want 2", len(residue), err)
	}
	if err := e.pol.DeletePolicy(ctx, server.h, fh, fwSpec.Owner); err != nil {
		t.Errorf("DeletePolicy(firewall): %v", err)
	}
	if err := e.pol.DeletePolicy(ctx, router.h, rh, routerSpec.Owner); err != nil {
		t.Errorf("DeletePolicy(router): %v", err)
	}
	if obs, _ := e.pol.ObservePolicy(ctx, server.h, fh, server.atts, fwSpec); obs.Status != substrate.Absent {
		t.Errorf("ObservePolicy after delete: got %s, want absent", obs.Status)
	}
	if _, ok := e.fetch(client, "http://203.0.113.10:8080/"); ok {
		t.Errorf("client reached server after the router policy was deleted: want forwarding off")
	}
	if residue, _ := e.pol.Residue(ctx, e.topology); len(residue) != 0 {
		t.Errorf("Residue after delete: got %+v, want none", residue)
	}
}

// tamper adds "tcp dport 9090 accept" at the top of the table's input chain, as an operator
// with nft would.
func tamper(t *testing.T, e *env, n *node, table string) {
	t.Helper()
	ns, err := e.nodes.NodeNetns(context.Background(), n.h)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := ns.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	c, err := nft.New(nft.WithNetNSFd(int(fd)))
	if err != nil {
		t.Fatal(err)
	}
	tb := &nft.Table{Name: table, Family: nft.TableFamilyIPv4}
	c.InsertRule(&nft.Rule{Table: tb, Chain: &nft.Chain{Name: "input", Table: tb}, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{6}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0x23, 0x82}},
		&expr.Verdict{Kind: expr.VerdictAccept},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("tamper: %v", err)
	}
}

// diagnose logs what the host side looked like when traffic failed (CI runs in parallel with
// other tiers that touch the host's firewall).
func diagnose(t *testing.T, e *env, nets ...substrate.Handle) {
	for i, n := range nets {
		addr := []string{"sysbox_network.lan", "sysbox_network.dmz"}[i%2]
		obs, err := e.nodes.ObserveNetwork(context.Background(), n, e.owner("sysbox_network", addr))
		t.Logf("diagnose: bridge %s: %s %s %v (%v)", n.ExternalID, obs.Status, obs.Reason, obs.Attributes, err)
	}
	rules, err := linuxnet.ForwardRules()
	t.Logf("diagnose: sysbox forward rules on the host: %d (%v)", len(rules), err)
}

func lookNft() (string, error) {
	for _, p := range []string{"/usr/sbin/nft", "/sbin/nft"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}
