package netns

import (
	"encoding/json"
	"strings"
	"testing"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func TestNamesFitInterfaceLimits(t *testing.T) {
	for _, o := range []substrate.Owner{
		{Topology: "5f0c1a2b-0000-4000-8000-000000000001", Address: `module.segment["red"].sysbox_node.target[1]`, Type: "sysbox_node", Generation: 12345},
		{Topology: "t", Address: "sysbox_network.lan", Type: "sysbox_network", Generation: 1},
	} {
		if got := BridgeName(o); len(got) > 15 || !linuxnet.ValidIfName(got) {
			t.Errorf("BridgeName(%s) = %q, want a valid name ≤ 15 bytes", o.Address, got)
		}
		if got := HostVethName(o, "a very long attachment name"); len(got) > 15 || !linuxnet.ValidIfName(got) {
			t.Errorf("HostVethName(%s) = %q, want a valid name ≤ 15 bytes", o.Address, got)
		}
		next := o
		next.Generation++
		if HostVethName(o, "lan") == HostVethName(next, "lan") {
			t.Errorf("HostVethName(%s): same name for generations %d and %d", o.Address, o.Generation, next.Generation)
		}
		if NetnsName(o) == NetnsName(next) {
			t.Errorf("NetnsName(%s): same name for two generations", o.Address)
		}
	}
}

func TestNodeIfName(t *testing.T) {
	for _, tc := range []struct {
		in       string
		same     bool
		wantLen  int
		wantPref string
	}{
		{in: "lan", same: true},
		{in: "wan0", same: true},
		{in: "lo", wantPref: "n"},
		{in: "sixteen-chars-xx", wantPref: "n"},
		{in: "has space", wantPref: "n"},
	} {
		got := NodeIfName(tc.in)
		if tc.same && got != tc.in {
			t.Errorf("NodeIfName(%q) = %q, want %q", tc.in, got, tc.in)
		}
		if !tc.same && (!strings.HasPrefix(got, tc.wantPref) || !linuxnet.ValidIfName(got)) {
			t.Errorf("NodeIfName(%q) = %q, want a valid derived name", tc.in, got)
		}
	}
}

func TestCheckPrivate(t *testing.T) {
	d := New()
	good := encode(private{Kind: kindNode, Netns: "sb-x-g1", NsInode: 7})
	if err := d.CheckPrivate(good); err != nil {
		t.Fatalf("valid node envelope: got %v, want nil", err)
	}
	future := good
	future.Version = 2
	raw, _ := json.Marshal(private{Kind: kindNode})
	for name, env := range map[string]substrate.Envelope{
		"future version":   future,
		"other driver":     {Driver: "docker", Version: 1, Data: good.Data},
		"node without ns":  {Driver: Name, Version: 1, Data: raw},
		"unknown kind":     encode(private{Kind: "mystery"}),
		"attach sans veth": encode(private{Kind: kindAttachment}),
	} {
		if err := d.CheckPrivate(env); err == nil {
			t.Errorf("%s: got nil, want an error", name)
		}
	}
}

func TestDescriptorRegisters(t *testing.T) {
	r := driver.NewRegistry()
	if err := Register(r); err != nil {
		t.Fatal(err)
	}
	for _, c := range []driver.Capability{driver.CapManagedNetwork, driver.CapNodeLifecycle, driver.CapNIC, driver.CapNodeState, driver.CapGuestExec, driver.CapReset, driver.CapImport, driver.CapAudit} {
		if err := r.Require("sysbox_node.x", Name, c); err != nil {
			t.Errorf("capability %s: got %v, want nil", c, err)
		}
	}
}
