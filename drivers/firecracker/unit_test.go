package firecracker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestConfigureGuestNetworkRefusesBadInput: what the driver adds to guestvm.NetworkConfig (whose
// own test covers the configuration itself): input it refuses is driver.ErrInvalid naming the
// node, before any record is read (this driver has none).
func TestConfigureGuestNetworkRefusesBadInput(t *testing.T) {
	d := New(Options{StateDir: t.TempDir()})
	h := substrate.Handle{Driver: Name, ExternalID: "fc-0123456789-g1"}
	for name, tc := range map[string]struct {
		atts   []substrate.AttachmentState
		routes []substrate.Route
	}{
		"no prefix length": {atts: []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10"}}}},
		"bad next hop":     {routes: []substrate.Route{{To: "192.0.2.0/24", Via: "nope"}}},
	} {
		err := d.ConfigureGuestNetwork(t.Context(), h, tc.atts, tc.routes)
		if !errors.Is(err, driver.ErrInvalid) || !strings.Contains(err.Error(), h.ExternalID) {
			t.Errorf("%s: got %v, want driver.ErrInvalid naming %s", name, err, h.ExternalID)
		}
	}
	// Valid input gets past the check: then the missing record is the error.
	ok := []substrate.AttachmentState{{Name: "a", MAC: "02:00:00:00:00:0a", IPv4: []string{"198.51.100.10/24"}}}
	if err := d.ConfigureGuestNetwork(t.Context(), h, ok, nil); err == nil || errors.Is(err, driver.ErrInvalid) {
		t.Errorf("valid input, no such node: got %v, want an error other than driver.ErrInvalid", err)
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
