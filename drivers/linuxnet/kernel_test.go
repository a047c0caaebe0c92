package linuxnet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestKernelVethIntoPidNamespace wires a process's namespace (by pid, as a container driver
// does) to an owned bridge and checks markers, observation, quiesce and marker-checked delete.
func TestKernelVethIntoPidNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "unshare")
	ctx := context.Background()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	netOwner := substrate.Owner{Topology: "test-" + id, Address: "sysbox_network.lan", Type: "sysbox_network", Generation: 1}
	nodeOwner := substrate.Owner{Topology: "test-" + id, Address: "sysbox_node.c", Type: "sysbox_node", Generation: 1}
	br := "sbt" + id

	// A process in its own network namespace, like a container's init.
	cmd := exec.Command("unshare", "--net", "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ns := PidNetns(cmd.Process.Pid)
	waitOwnNetns(t, ns)

	if err := CreateBridge(ctx, BridgeSpec{Name: br, Owner: netOwner}); err != nil {
		t.Fatalf("CreateBridge: %v", err)
	}
	t.Cleanup(func() { _ = DeleteBridge(ctx, br, netOwner) })
	v, err := CreateVeth(ctx, VethSpec{HostName: "sv" + id, Bridge: br, Netns: ns, NodeName: "eth0",
		MAC: DefaultMAC(nodeOwner.Address, "lan"), IPv4: []string{"192.0.2.7/24"}, Owner: nodeOwner})
	if err != nil {
		t.Fatalf("CreateVeth: %v", err)
	}
	t.Cleanup(func() { _ = DeleteVeth(ctx, v.HostName, nodeOwner) })
	if err := ConfigureGuest(ctx, ns, []GuestInterface{{Name: "eth0", IPv4: v.IPv4, Gateway: "192.0.2.1"}}, nil); err != nil {
		t.Fatalf("ConfigureGuest: %v", err)
	}

	obs, err := ObserveVeth(ctx, v, nodeOwner)
	if err != nil || obs.Status != substrate.Present {
		t.Fatalf("ObserveVeth: got %+v, %v; want present", obs, err)
	}
	// The host side is a bridge port: no IPv6 of its own (disablePortIPv6).
	if _, err := os.Stat("/proc/sys/net/ipv6"); err == nil {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + v.HostName + "/disable_ipv6")
		if err != nil || strings.TrimSpace(string(b)) != "1" {
			t.Errorf("host side %s: disable_ipv6 = %q (%v), want 1", v.HostName, b, err)
		}
		host, err := netlink.LinkByName(v.HostName)
		if err != nil {
			t.Fatal(err)
		}
		if addrs, err := netlink.AddrList(host, netlink.FAMILY_V6); err != nil || len(addrs) != 0 {
			t.Errorf("host side %s: IPv6 addresses %v (%v), want none", v.HostName, addrs, err)
		}
	}
	nh, err := ns.Netlink()
	if err != nil {
		t.Fatal(err)
	}
	defer nh.Close()
	routes, _ := nh.RouteList(nil, netlink.FAMILY_V4)
	var gw string
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			gw = r.Gw.String()
		}
	}
	if gw != "192.0.2.1" {
		t.Errorf("default route inside: got gateway %q, want 192.0.2.1", gw)
	}
	peer, _ := nh.LinkByName("eth0")
	if peer == nil || !strings.HasPrefix(peer.Attrs().Alias, "sysbox1:") {
		t.Errorf("node side alias: got %v, want the owner marker", peer)
	}

	// Another owner is refused; quiesce takes the host end off the bridge.
	other := nodeOwner
	other.Address = "sysbox_node.d"
	if err := DeleteVeth(ctx, v.HostName, other); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("DeleteVeth by another owner: got %v, want ErrNotOwned", err)
	}
	if err := QuiesceVeth(ctx, v.HostName, nodeOwner); err != nil {
		t.Fatalf("QuiesceVeth: %v", err)
	}
	if obs, _ := ObserveVeth(ctx, v, nodeOwner); obs.Status != substrate.Drifted {
		t.Errorf("ObserveVeth after quiesce: got %s, want drifted", obs.Status)
	}
	if err := DeleteVeth(ctx, v.HostName, nodeOwner); err != nil {
		t.Fatalf("DeleteVeth: %v", err)
	}
	if obs, _ := ObserveVeth(ctx, v, nodeOwner); obs.Status != substrate.Absent {
		t.Errorf("ObserveVeth after delete: got %s, want absent", obs.Status)
	}
	if err := DeleteBridge(ctx, br, netOwner); err != nil {
		t.Fatalf("DeleteBridge: %v", err)
	}
	if res, err := HostResidue(ctx, netOwner.Topology); err != nil || len(res) != 0 {
		t.Errorf("HostResidue after deletes: got %v, %v; want none", res, err)
	}
}

func waitOwnNetns(t *testing.T, ns Netns) {
	t.Helper()
	for range 200 {
		h, err := ns.Netlink()
		if err == nil {
			links, _ := h.LinkList()
			h.Close()
			if len(links) == 1 { // only lo: the process is in its new namespace
				return
			}
		}
		sleepMs(5)
	}
	t.Fatalf("process never entered its own network namespace")
}

func sleepMs(n int) { <-time.After(time.Duration(n) * time.Millisecond) }

// TestKernelBridgeMACPinned: the bridge's MAC is BridgeMAC(owner) from creation and stays when
// a port with a lower MAC joins and leaves (an unpinned bridge would take the port's MAC); a
// bridge whose MAC was changed is pinned again when adopted; observation reports it.
func TestKernelBridgeMACPinned(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	owner := substrate.Owner{Topology: "test-" + id, Address: "sysbox_network.lan", Type: "sysbox_network", Generation: 1}
	br := "sbm" + id
	want := BridgeMAC(owner)
	if want[0]&0x03 != 0x02 {
		t.Fatalf("BridgeMAC: got %s, want a locally administered unicast MAC", want)
	}
	if err := CreateBridge(ctx, BridgeSpec{Name: br, Owner: owner}); err != nil {
		t.Fatalf("CreateBridge: %v", err)
	}
	t.Cleanup(func() { _ = DeleteBridge(ctx, br, owner) })
	mac := func(what string) string {
		t.Helper()
		l, err := netlink.LinkByName(br)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return l.Attrs().HardwareAddr.String()
	}
	if got := mac("after create"); got != want.String() {
		t.Fatalf("bridge MAC after create: got %s, want %s", got, want)
	}

	brLink, err := netlink.LinkByName(br)
	if err != nil {
		t.Fatal(err)
	}
	low, _ := net.ParseMAC("02:00:00:00:00:01")
	port := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "sbp" + id, HardwareAddr: low, MasterIndex: brLink.Attrs().Index}, PeerName: "sbq" + id}
	if err := netlink.LinkAdd(port); err != nil {
		t.Fatalf("add port: %v", err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(port) })
	if err := netlink.LinkSetUp(port); err != nil {
		t.Fatal(err)
	}
	if got := mac("with a lower-MAC port"); got != want.String() {
		t.Errorf("bridge MAC with a port of MAC %s: got %s, want %s (pinned)", low, got, want)
	}
	if err := netlink.LinkDel(port); err != nil {
		t.Fatal(err)
	}
	if got := mac("after the port left"); got != want.String() {
		t.Errorf("bridge MAC after the port left: got %s, want %s", got, want)
	}

	// Changed by hand: adoption pins it again.
	other, _ := net.ParseMAC("02:00:5e:00:53:01")
	if err := netlink.LinkSetHardwareAddr(brLink, other); err != nil {
		t.Fatal(err)
	}
	if obs, err := ObserveBridge(ctx, br, owner); err != nil || obs.Attributes["mac"] != other.String() || obs.Attributes["mac_pinned"] != "false" {
		t.Errorf("ObserveBridge with a changed MAC: got %+v, %v; want mac %s, mac_pinned false", obs.Attributes, err, other)
	}
	if err := CreateBridge(ctx, BridgeSpec{Name: br, Owner: owner}); err != nil {
		t.Fatalf("CreateBridge (adopt): %v", err)
	}
	if got := mac("after adoption"); got != want.String() {
		t.Errorf("bridge MAC after adoption: got %s, want %s", got, want)
	}
	if obs, err := ObserveBridge(ctx, br, owner); err != nil || obs.Attributes["mac"] != want.String() || obs.Attributes["mac_pinned"] != "true" {
		t.Errorf("ObserveBridge: got %+v, %v; want mac %s, mac_pinned true", obs.Attributes, err, want)
	}
}
