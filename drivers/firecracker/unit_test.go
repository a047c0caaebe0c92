package firecracker

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestGuestNetwork: every IPv4 address of every attachment goes on the NIC with its MAC, the
// first gateway (or a route to 0.0.0.0/0) is the default route, other routes stay; bad input
// is refused before anything reaches the guest.
func TestGuestNetwork(t *testing.T) {
	atts := []substrate.AttachmentState{
		{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10/24", "198.51.100.11/24"}, Gateway: "198.51.100.1"},
		{Name: "b", MAC: "02:00:00:00:00:0b", IPv4: []string{"203.0.113.10/24"}, Gateway: "203.0.113.1"},
		{Name: "c", MAC: "02:00:00:00:00:0c"},
	}
	got, err := guestNetwork(atts, []substrate.Route{{To: "192.0.2.7/24", Via: "203.0.113.1"}})
	must(t, err)
	want := &guestagent.NetworkConfig{
		Interfaces: []guestagent.NetInterface{
			{MAC: "02:00:00:00:00:0a", Addresses: []string{"198.51.100.10/24", "198.51.100.11/24"}},
			{MAC: "02:00:00:00:00:0b", Addresses: []string{"203.0.113.10/24"}},
		},
		Gateway: "198.51.100.1",
		Routes:  []guestagent.Route{{Destination: "192.0.2.0/24", Via: "203.0.113.1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("guestNetwork:\n got %+v\nwant %+v", got, want)
	}
	got, err = guestNetwork(atts[:1], []substrate.Route{{To: "0.0.0.0/0", Via: "198.51.100.254"}})
	if err != nil || got.Gateway != "198.51.100.254" || len(got.Routes) != 0 {
		t.Fatalf("a default route: got %+v, %v; want gateway 198.51.100.254 and no other route", got, err)
	}
	if got, err := guestNetwork(atts[2:], nil); got != nil || err != nil {
		t.Fatalf("nothing to configure: got %+v, %v; want nil", got, err)
	}
	for name, tc := range map[string]struct {
		atts   []substrate.AttachmentState
		routes []substrate.Route
	}{
		"IPv6 address":     {atts: []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"2001:db8::1/64"}}}},
		"no prefix length": {atts: []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10"}}}},
		"bad gateway":      {atts: []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10/24"}, Gateway: "nope"}}},
		"bad next hop":     {routes: []substrate.Route{{To: "192.0.2.0/24", Via: "nope"}}},
		"IPv6 route":       {routes: []substrate.Route{{To: "2001:db8::/32", Via: "198.51.100.1"}}},
	} {
		if got, err := guestNetwork(tc.atts, tc.routes); err == nil {
			t.Errorf("%s: got %+v, want an error", name, got)
		}
	}
	// ConfigureGuestNetwork refuses the same input as invalid before reading any record.
	d := New(Options{StateDir: t.TempDir()})
	h := substrate.Handle{Driver: Name, ExternalID: "fc-0123456789-g1"}
	bad := []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10"}}}
	if err := d.ConfigureGuestNetwork(t.Context(), h, bad, nil); !errors.Is(err, driver.ErrInvalid) {
		t.Errorf("ConfigureGuestNetwork(bad address): got %v, want driver.ErrInvalid", err)
	}
}

func TestCheckPrivate(t *testing.T) {
	d := New(Options{})
	good, _ := json.Marshal(nodePrivate{Name: "fc-0123456789-g1", Dir: "/run/x", Socket: "/run/x/api.sock", PID: 42, StartTime: 7, Generation: 1})
	noPID, _ := json.Marshal(nodePrivate{Name: "fc-0123456789-g1", Socket: "/run/x/api.sock", Generation: 1})
	nic, _ := json.Marshal(nicPrivate{TAP: "sbf0123", Bridge: "br0", IfaceID: "eth0"})
	for _, tc := range []struct {
		name string
		env  substrate.Envelope
		ok   bool
	}{
		{"node", substrate.Envelope{Driver: Name, Version: 1, Data: good}, true},
		{"attachment", substrate.Envelope{Driver: Name, Version: 1, Data: nic}, true},
		{"no process identity", substrate.Envelope{Driver: Name, Version: 1, Data: noPID}, false},
		{"future version", substrate.Envelope{Driver: Name, Version: 2, Data: good}, false},
		{"other driver", substrate.Envelope{Driver: "docker", Version: 1, Data: good}, false},
		{"garbage", substrate.Envelope{Driver: Name, Version: 1, Data: json.RawMessage(`[1]`)}, false},
	} {
		if err := d.CheckPrivate(tc.env); (err == nil) != tc.ok {
			t.Errorf("CheckPrivate(%s): got %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
