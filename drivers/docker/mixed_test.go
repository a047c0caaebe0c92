package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestDaemonMixedWithNetnsNode puts a Docker container and a netns node on one bridge made by
// the netns driver's managed network, and has them exchange traffic both ways (busybox httpd,
// wget, ping), by address and by attachment alias.
func TestDaemonMixedWithNetnsNode(t *testing.T) {
	d := daemonDriver(t)
	bb := testenv.RequireBinary(t, "busybox")
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", "container-"+topo)
	nd := netns.New()

	netOwner := substrate.Owner{Topology: topo, Address: "sysbox_network.lan", Type: "sysbox_network", Generation: 1}
	netH, err := nd.CreateNetwork(ctx, substrate.NetworkSpec{Owner: netOwner, IPv4CIDR: "203.0.113.0/24"})
	if err != nil {
		t.Fatalf("netns CreateNetwork: %v", err)
	}
	t.Cleanup(func() { _ = nd.DeleteNetwork(ctx, netH, netOwner) })

	// The netns node serves a page from a host directory.
	www := t.TempDir()
	if err := os.WriteFile(filepath.Join(www, "index.html"), []byte("netns-"+topo), 0o644); err != nil {
		t.Fatal(err)
	}
	nsOwner := testOwner(topo, "host")
	nsSpec := substrate.NodeSpec{Owner: nsOwner, Driver: netns.Name, Command: []string{bb, "httpd", "-f", "-p", "80", "-h", www}}
	nsH, err := nd.CreateNode(ctx, nsSpec)
	if err != nil {
		t.Fatalf("netns CreateNode: %v", err)
	}
	t.Cleanup(func() { _ = nd.DeleteNode(ctx, nsH, nsOwner) })
	nsAtt, err := nd.Attach(ctx, nsH, substrate.AttachmentSpec{Owner: nsOwner, Node: nsOwner.Address, Name: "lan", Network: netH,
		IPv4: []string{"203.0.113.10/24"}, MAC: "02:00:cb:00:71:0a"})
	if err != nil {
		t.Fatalf("netns Attach: %v", err)
	}
	if err := nd.ConfigureGuestNetwork(ctx, nsH, []substrate.AttachmentState{nsAtt}, nil); err != nil {
		t.Fatalf("netns ConfigureGuestNetwork: %v", err)
	}
	if err := nd.StartNode(ctx, nsH, nsSpec); err != nil {
		t.Fatalf("netns StartNode: %v", err)
	}

	// The container serves its image's page.
	cOwner := testOwner(topo, "ctr")
	cSpec := substrate.NodeSpec{Owner: cOwner, Driver: Name, Artifact: &art, Command: []string{"httpd", "-f", "-p", "80", "-h", "/www"}}
	cH, err := d.CreateNode(ctx, cSpec)
	if err != nil {
		t.Fatal(err)
	}
	cAtt, err := d.Attach(ctx, cH, substrate.AttachmentSpec{Owner: cOwner, Node: cOwner.Address, Name: "lan", Network: netH,
		IPv4: []string{"203.0.113.20/24"}, MAC: "02:00:cb:00:71:14"})
	if err != nil {
		t.Fatalf("docker Attach to the netns driver's bridge: %v", err)
	}
	if err := d.ConfigureGuestNetwork(ctx, cH, []substrate.AttachmentState{cAtt}, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, cH, cSpec); err != nil {
		t.Fatal(err)
	}

	exchanges := []struct {
		name string
		run  func() (substrate.ExecResult, error)
		want string
	}{
		{"container GETs the netns node", func() (substrate.ExecResult, error) {
			return d.Exec(ctx, cH, substrate.ExecRequest{Argv: []string{"wget", "-q", "-O", "-", "http://203.0.113.10/index.html"}, Timeout: 10 * time.Second})
		}, "netns-" + topo},
		{"netns node GETs the container", func() (substrate.ExecResult, error) {
			return nd.Exec(ctx, nsH, substrate.ExecRequest{Argv: []string{bb, "wget", "-q", "-O", "-", "http://203.0.113.20/index.html"}, Timeout: 10 * time.Second})
		}, "container-" + topo},
		{"container pings the netns node", func() (substrate.ExecResult, error) {
			return d.Exec(ctx, cH, substrate.ExecRequest{Argv: []string{"ping", "-c", "1", "-W", "3", "203.0.113.10"}, Timeout: 10 * time.Second})
		}, "1 packets received"},
		{"netns node pings the container", func() (substrate.ExecResult, error) {
			return nd.Exec(ctx, nsH, substrate.ExecRequest{Argv: []string{bb, "ping", "-c", "1", "-W", "3", "203.0.113.20"}, Timeout: 10 * time.Second})
		}, "1 packets received"},
	}
	for _, x := range exchanges {
		// A started node is not yet a listening httpd: the first exchange with each waits for it.
		res, err := untilServing(x.run)
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), x.want) {
			t.Fatalf("%s: got exit %d stdout %q stderr %q, %v; want %q", x.name, res.ExitCode, res.Stdout, res.Stderr, err, x.want)
		}
	}

	// Attachment aliases (S8): each side resolves the other's alias — the container through
	// its own /etc/hosts (written by SetHosts from the host: the container has no hosts file of
	// Docker's), the netns node through its own — and pings it by name; static busybox reads
	// /etc/hosts itself (no NSS module needed).
	entries := []driver.HostEntry{{Address: "203.0.113.10", Names: []string{"web-ns"}}, {Address: "203.0.113.20", Names: []string{"web-ctr", "ctr"}}}
	if err := d.SetHosts(ctx, cH, cOwner, entries); err != nil {
		t.Fatalf("docker SetHosts: %v", err)
	}
	if err := nd.SetHosts(ctx, nsH, nsOwner, entries); err != nil {
		t.Fatalf("netns SetHosts: %v", err)
	}
	if err := d.SetHosts(ctx, cH, cOwner, entries); err != nil { // again: replaces, never appends
		t.Fatalf("docker SetHosts again: %v", err)
	}
	byName := []struct {
		name string
		run  func() (substrate.ExecResult, error)
		want string
	}{
		{"container pings the netns node by alias", func() (substrate.ExecResult, error) {
			return d.Exec(ctx, cH, substrate.ExecRequest{Argv: []string{"ping", "-c", "1", "-W", "3", "web-ns"}, Timeout: 10 * time.Second})
		}, "1 packets received"},
		{"container GETs the netns node by alias", func() (substrate.ExecResult, error) {
			return d.Exec(ctx, cH, substrate.ExecRequest{Argv: []string{"wget", "-q", "-O", "-", "http://web-ns/index.html"}, Timeout: 10 * time.Second})
		}, "netns-" + topo},
		{"netns node pings the container by alias", func() (substrate.ExecResult, error) {
			return nd.Exec(ctx, nsH, substrate.ExecRequest{Argv: []string{bb, "ping", "-c", "1", "-W", "3", "ctr"}, Timeout: 10 * time.Second})
		}, "1 packets received"},
		{"container's hosts file holds one sysbox section", func() (substrate.ExecResult, error) {
			return d.Exec(ctx, cH, substrate.ExecRequest{Argv: []string{"cat", "/etc/hosts"}, Timeout: 10 * time.Second})
		}, "203.0.113.20\tweb-ctr ctr\n"},
		{"container still resolves localhost", func() (substrate.ExecResult, error) {
			return d.Exec(ctx, cH, substrate.ExecRequest{Argv: []string{"ping", "-c", "1", "-W", "3", "localhost"}, Timeout: 10 * time.Second})
		}, "1 packets received"},
	}
	for _, x := range byName {
		res, err := x.run()
		if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), x.want) {
			t.Fatalf("%s: got exit %d stdout %q stderr %q, %v; want %q", x.name, res.ExitCode, res.Stdout, res.Stderr, err, x.want)
		}
		if n := strings.Count(string(res.Stdout), "# sysbox owner "); x.want[0] == '2' && n != 1 {
			t.Fatalf("%s: %d sysbox owner lines, want 1:\n%s", x.name, n, res.Stdout)
		}
	}

	if err := d.Detach(ctx, cH, cAtt, cOwner); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, cH, cOwner); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Residue(ctx, topo); err != nil || len(res) != 0 {
		t.Fatalf("docker Residue after delete: got %+v, %v; want none", res, err)
	}
}
