package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/drivers/nftables"
	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestDaemonFirewallInsideContainer applies a firewall policy through the nftables driver, which
// finds the container's namespace through this driver (linuxnet.NamespaceResolver), and checks
// what passes from a neighbour container before, during and after.
func TestDaemonFirewallInsideContainer(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", topo)
	br := testBridge(t, topo, "")

	reg := driver.NewRegistry()
	if err := reg.Register(d); err != nil {
		t.Fatal(err)
	}
	if err := nftables.Register(reg); err != nil {
		t.Fatal(err)
	}
	pol, err := driver.Get[driver.Policy](reg, nftables.Name, driver.CapPolicy)
	if err != nil {
		t.Fatal(err)
	}

	type node struct {
		h     substrate.Handle
		owner substrate.Owner
		att   substrate.AttachmentState
	}
	mk := func(name, ip string, cmd ...string) node {
		owner := testOwner(topo, name)
		h, _ := mustNode(t, d, owner, art, cmd...)
		st, err := d.Attach(ctx, h, substrate.AttachmentSpec{Owner: owner, Node: owner.Address, Name: "lan", Network: br, IPv4: []string{ip + "/24"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.ConfigureGuestNetwork(ctx, h, []substrate.AttachmentState{st}, nil); err != nil {
			t.Fatal(err)
		}
		return node{h: h, owner: owner, att: st}
	}
	// web serves on 80 and 8080; client probes it.
	web := mk("web", "192.0.2.10", "sh", "-c", "httpd -p 8080 -h /www; exec httpd -f -p 80 -h /www")
	client := mk("client", "192.0.2.20", "sleep", "3600")

	// Busybox 1.35's wget -T crashes, so the exec timeout bounds a dropped connection; the
	// abandoned wget dies with the container.
	probes := map[string][]string{
		"http 80":   {"wget", "-q", "-O", "-", "http://192.0.2.10:80/index.html"},
		"http 8080": {"wget", "-q", "-O", "-", "http://192.0.2.10:8080/index.html"},
		"ping":      {"ping", "-c", "1", "-W", "2", "192.0.2.10"},
	}
	passes := func(name string, timeout time.Duration) bool {
		res, err := d.Exec(ctx, client.h, substrate.ExecRequest{Argv: probes[name], Timeout: timeout})
		return err == nil && res.ExitCode == 0
	}
	// What must pass is tried again until it does, for up to 30 s: a started httpd is not yet
	// listening, and on a loaded host a docker exec alone can outlast the 3 s that bound a
	// dropped connection. What must be blocked is tried once; passing is a failure at once.
	check := func(stage string, want map[string]bool) {
		t.Helper()
		for name, w := range want {
			if !w {
				if passes(name, 3*time.Second) {
					t.Errorf("%s: %s passes, want blocked", stage, name)
				}
				continue
			}
			ok := passes(name, 10*time.Second)
			for deadline := time.Now().Add(30 * time.Second); !ok && time.Now().Before(deadline); ok = passes(name, 10*time.Second) {
				time.Sleep(200 * time.Millisecond)
			}
			if !ok {
				t.Errorf("%s: %s blocked for 30 s, want it to pass", stage, name)
			}
		}
	}
	all := map[string]bool{"http 80": true, "http 8080": true, "ping": true}
	check("before the policy", all)

	spec := substrate.PolicySpec{
		Owner: substrate.Owner{Topology: topo, Address: "sysbox_firewall.web", Type: "sysbox_firewall", Generation: 1},
		Firewall: &substrate.Firewall{DefaultInput: "drop", DefaultForward: "drop", DefaultOutput: "accept", Rules: []substrate.Rule{
			{Chain: "input", Action: "accept", Protocol: "tcp", DestinationPort: 80, Attachment: "lan"},
		}},
	}
	atts := []substrate.AttachmentState{web.att}
	ph, err := pol.ApplyPolicy(ctx, web.h, atts, spec)
	if err != nil {
		t.Fatalf("ApplyPolicy in the container: %v", err)
	}
	t.Cleanup(func() { _ = pol.DeletePolicy(ctx, web.h, ph, spec.Owner) })
	check("with the firewall", map[string]bool{"http 80": true, "http 8080": false, "ping": false})
	if obs, err := pol.ObservePolicy(ctx, web.h, ph, atts, spec); err != nil || obs.Status != substrate.Present {
		t.Fatalf("ObservePolicy: got %s (%s), %v; want present", obs.Status, obs.Reason, err)
	}
	// The table lives in the container's namespace, not the host's.
	nft := testenv.RequireBinary(t, "nft")
	table := nftables.TableName(spec.Owner)
	hostTables, err := (argv.Exec{}).Run(ctx, argv.Cmd{Argv: []string{nft, "list", "tables"}})
	if err != nil || strings.Contains(string(hostTables.Stdout), table) {
		t.Fatalf("host namespace tables: got %q, %v; want no %s", hostTables.Stdout, err, table)
	}
	ns, err := d.NodeNetns(ctx, web.h)
	if err != nil {
		t.Fatal(err)
	}
	inside, err := (argv.Exec{}).Run(ctx, argv.Cmd{Argv: []string{testenv.RequireBinary(t, "nsenter"), "--net=" + ns.Path, nft, "list", "tables"}})
	if err != nil || !strings.Contains(string(inside.Stdout), table) {
		t.Fatalf("container namespace tables: got %q, %v; want %s", inside.Stdout, err, table)
	}
	if err := pol.DeletePolicy(ctx, web.h, ph, spec.Owner); err != nil {
		t.Fatalf("DeletePolicy: %v", err)
	}
	check("after the policy is deleted", all)
	if t.Failed() {
		out, _ := d.Exec(ctx, web.h, substrate.ExecRequest{Argv: []string{"ip", "addr"}})
		t.Logf("web: %s", strings.TrimSpace(string(out.Stdout)))
	}
}
