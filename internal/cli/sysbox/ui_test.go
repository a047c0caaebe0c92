package sysbox

import "testing"

func TestUIListenLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		listen string
		ok     bool
	}{
		{"127.0.0.1:8081", true},
		{"[::1]:0", true},
		{"0.0.0.0:8081", false},
		{":8081", false},
		{"192.0.2.1:8081", false},
		{"localhost:8081", false}, // a name may resolve anywhere: an IP is required
		{"127.0.0.1", false},
	} {
		if err := checkLoopback(tc.listen); (err == nil) != tc.ok {
			t.Errorf("--listen %s: got error %v, want ok %v", tc.listen, err, tc.ok)
		}
	}
}
