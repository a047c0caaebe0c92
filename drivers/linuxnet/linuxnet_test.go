package linuxnet

import (
	"strings"
	"testing"
)

func TestDefaultMAC(t *testing.T) {
	a := DefaultMAC("sysbox_node.web[0]", "lan")
	if a[0]&0x02 == 0 || a[0]&0x01 != 0 {
		t.Errorf("DefaultMAC = %s: want locally administered unicast", a)
	}
	if b := DefaultMAC("sysbox_node.web[0]", "lan"); b.String() != a.String() {
		t.Errorf("DefaultMAC not deterministic: %s then %s", a, b)
	}
	for _, other := range [][2]string{{"sysbox_node.web[1]", "lan"}, {"sysbox_node.web[0]", "wan"}} {
		if b := DefaultMAC(other[0], other[1]); b.String() == a.String() {
			t.Errorf("DefaultMAC(%q, %q) = %s collides with web[0]/lan", other[0], other[1], b)
		}
	}
}

func TestParseMAC(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr string
	}{
		{in: ""},
		{in: "02:00:00:00:00:0b"},
		{in: "01:00:5e:00:00:01", wantErr: "multicast"},
		{in: "02:00:00:00:00:00:00:01", wantErr: "48-bit"},
		{in: "zz", wantErr: "48-bit"},
	} {
		_, err := ParseMAC(tc.in)
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("ParseMAC(%q): got %v, want error containing %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestParseIPv4Prefix(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "198.51.100.10/24", want: "198.51.100.10/24"},
		{in: "2001:db8::1/64", bad: true},
		{in: "198.51.100.10", bad: true},
		{in: "nonsense", bad: true},
	} {
		got, err := ParseIPv4Prefix(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("ParseIPv4Prefix(%q) = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got.String() != tc.want {
			t.Errorf("ParseIPv4Prefix(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestIfNameAndValidity(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"lan", true}, {"sbr0123456789ab", true}, {"sixteen-chars-xx", false}, {"lo", false},
		{"", false}, {"has space", false}, {"a/b", false}, {"..", false},
	} {
		if got := ValidIfName(tc.name); got != tc.ok {
			t.Errorf("ValidIfName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
	}
	n := IfName("sv", "topology", "sysbox_node.a", "lan", "1")
	if len(n) != 15 || !strings.HasPrefix(n, "sv") || !ValidIfName(n) {
		t.Errorf("IfName = %q, want a valid 15-byte name starting with sv", n)
	}
	if IfName("sv", "a", "b") == IfName("sv", "ab", "") {
		t.Errorf("IfName does not separate its parts")
	}
}
