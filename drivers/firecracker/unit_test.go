package firecracker

import (
	"encoding/json"
	"errors"
	"testing"

	"zyvor.dev/sysbox/internal/feature"
	"zyvor.dev/sysbox/pkg/substrate"
)

func TestKernelIPArg(t *testing.T) {
	for _, tc := range []struct{ prefix, gw, want string }{
		{"198.51.100.10/24", "198.51.100.1", "ip=198.51.100.10::198.51.100.1:255.255.255.0::eth0:off"},
		{"203.0.113.5/30", "", "ip=203.0.113.5:::255.255.255.252::eth0:off"},
	} {
		got, err := kernelIPArg(tc.prefix, tc.gw)
		if err != nil || got != tc.want {
			t.Errorf("kernelIPArg(%q, %q) = %q, %v; want %q", tc.prefix, tc.gw, got, err, tc.want)
		}
	}
	for _, bad := range [][2]string{{"2001:db8::1/64", ""}, {"198.51.100.10", ""}, {"198.51.100.10/24", "nope"}} {
		if got, err := kernelIPArg(bad[0], bad[1]); err == nil {
			t.Errorf("kernelIPArg(%q, %q) = %q, want an error", bad[0], bad[1], got)
		}
	}
}

// TestGuestNetworkLimits: what the kernel command line cannot carry is a typed not-supported
// error, before anything is read or sent.
func TestGuestNetworkLimits(t *testing.T) {
	d := New(Options{StateDir: t.TempDir()})
	h := substrate.Handle{Driver: Name, ExternalID: "fc-0123456789-g1"}
	two := []substrate.AttachmentState{{Name: "a", IPv4: []string{"198.51.100.10/24"}}, {Name: "b", IPv4: []string{"203.0.113.10/24"}}}
	if err := d.ConfigureGuestNetwork(t.Context(), h, two, nil); !errors.Is(err, feature.ErrNotSupported) {
		t.Errorf("two addresses: got %v, want feature.ErrNotSupported", err)
	}
	one := two[:1]
	routes := []substrate.Route{{To: "192.0.2.0/24", Via: "198.51.100.1"}}
	if err := d.ConfigureGuestNetwork(t.Context(), h, one, routes); !errors.Is(err, feature.ErrNotSupported) {
		t.Errorf("a non-default route: got %v, want feature.ErrNotSupported", err)
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
