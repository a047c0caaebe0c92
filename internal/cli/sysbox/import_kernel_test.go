package sysbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// importTopology has one resource of every kind the netns and nftables drivers can import:
// two networks, a node, a firewall and a router on it; HANDMADE is a hand-made bridge's name.
const importTopology = `
substrate "local" {
  driver "netns" {}
  driver "nftables" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}
resource "sysbox_network" "wan" {
  ipv4_cidr = "203.0.113.0/24"
}
resource "sysbox_node" "gw" {
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.1/24"]
  }
  attachment "wan" {
    network = sysbox_network.wan
    ipv4    = ["203.0.113.2/24"]
  }
}
resource "sysbox_firewall" "gw" {
  node          = sysbox_node.gw
  default_input = "drop"
  rule {
    chain      = "input"
    action     = "accept"
    protocol   = "icmp"
    attachment = "lan"
  }
}
resource "sysbox_router" "edge" {
  node = sysbox_node.gw
  masquerade {
    out_attachment = "wan"
    source         = "198.51.100.0/24"
  }
}
`

// TestImportEveryKindRealDrivers (kernel tier): apply, forget every resource with state rm,
// import each object back (network, node, firewall, router), and plan: no changes. Imports of
// an object carrying another resource's markers are refused naming that topology and address,
// and a hand-made unmarked bridge is claimed and later destroyed with the topology.
func TestImportEveryKindRealDrivers(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(importTopology), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := netnsOnlyCLI(t, dir)
	statePath := filepath.Join(dir, ".sysbox", "state")
	expectResult(t, sb("apply", "-auto-approve"), 0, "Apply complete.")
	st := readLocalState(t, statePath)
	t.Cleanup(func() { // objects forgotten by a failed step would escape destroy
		if err := netns.New().Scrub(context.Background(), st.Lineage); err != nil {
			t.Errorf("scrub %s: %v", st.Lineage, err)
		}
	})
	ext := map[string]string{}
	order := []string{"sysbox_network.lan", "sysbox_network.wan", "sysbox_node.gw", "sysbox_firewall.gw", "sysbox_router.edge"}
	for _, a := range order {
		r := st.Resource(addrs.MustParseInstance(a))
		if r == nil || r.ExternalID == "" {
			t.Fatalf("%s: not in state after apply: %+v", a, r)
		}
		ext[a] = r.ExternalID
	}
	expectResult(t, sb(append([]string{"state", "rm"}, order...)...), 0)

	// Another resource's object is refused, whose it is named, nothing recorded.
	for _, c := range [][3]string{
		{"sysbox_network.wan", ext["sysbox_network.lan"], "belongs to sysbox_network sysbox_network.lan (topology " + st.Lineage + ")"},
		{"sysbox_node.gw", ext["sysbox_network.lan"], "not a mounted network namespace"},
	} {
		expectResult(t, sb("import", c[0], c[1]), 1, c[2])
	}
	for _, a := range order[:3] {
		expectResult(t, sb("import", a, ext[a]), 0, "Imported "+ext[a]+" as "+a)
	}
	expectResult(t, sb("import", "sysbox_router.edge", ext["sysbox_firewall.gw"]), 1,
		"belongs to sysbox_firewall sysbox_firewall.gw (topology "+st.Lineage+")")
	for _, a := range order[3:] {
		expectResult(t, sb("import", a, ext[a]), 0, "Imported "+ext[a]+" as "+a)
	}
	expectResult(t, sb("import", "sysbox_network.lan", ext["sysbox_network.lan"]), 1, "already")
	if r := sb("plan", "-detailed-exitcode"); r.code != 0 || !strings.Contains(r.stdout, "No changes") {
		t.Fatalf("plan after importing every resource: exit %d, want 0 (no changes)\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	expectResult(t, sb("refresh"), 0, "sysbox_firewall.gw: present", "sysbox_router.edge: present", "sysbox_network.lan: present", "sysbox_node.gw: present")

	// An unmarked bridge made by hand is claimed by import: marked, and destroyed with the topology.
	expectResult(t, sb("state", "rm", "sysbox_network.wan", "sysbox_node.gw", "sysbox_firewall.gw", "sysbox_router.edge"), 0)
	// lan only: the forgotten rest is residue the audit names.
	expectResult(t, sb("destroy", "-auto-approve"), 1, "still carry topology "+st.Lineage, "netns "+ext["sysbox_node.gw"]+" (sysbox_node.gw generation 1)")
	if err := netns.New().Scrub(context.Background(), st.Lineage); err != nil {
		t.Fatal(err)
	}
	name := "sbimp" + st.Lineage[:8]
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if l, err := netlink.LinkByName(name); err == nil {
			_ = netlink.LinkDel(l)
			t.Errorf("hand-made bridge %s outlived destroy", name)
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(strings.SplitN(importTopology, `resource "sysbox_network" "wan"`, 2)[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	expectResult(t, sb("import", "sysbox_network.lan", name), 0, "Imported "+name+" as sysbox_network.lan")
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := substrate.ParseMarker(l.Attrs().Alias); err != nil || o.Address != "sysbox_network.lan" || o.Topology != st.Lineage {
		t.Fatalf("claimed bridge %s: marker %+v (%v), want sysbox_network.lan of %s", name, o, err, st.Lineage)
	}
	if r := sb("plan", "-detailed-exitcode"); r.code != 0 {
		t.Fatalf("plan after claiming a hand-made bridge: exit %d, want 0\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	expectResult(t, sb("destroy", "-auto-approve"), 0, "Residue audit: no object carries this topology's markers.")
	if _, err := netlink.LinkByName(name); err == nil {
		t.Fatalf("bridge %s still exists after destroy", name)
	}
}
