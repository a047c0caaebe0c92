package handlers

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
)

// TestDefaultMACFormat: defaultMAC writes the hex digits itself; it must give what the
// format it replaced gives.
func TestDefaultMACFormat(t *testing.T) {
	for i := 0; i < 2000; i++ {
		addr := addrs.NewInstance(nil, addrs.Resource{Mode: addrs.Managed, Type: "sysbox_node", Name: fmt.Sprintf("n%d", i)}, addrs.NoKey)
		name := fmt.Sprintf("lan%d", i%7)
		sum := sha256.Sum256([]byte(addr.String() + "\x00" + name))
		sum[0] = sum[0]&0xfc | 0x02
		want := fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", sum[0], sum[1], sum[2], sum[3], sum[4], sum[5])
		if got := defaultMAC(addr, name); got != want {
			t.Fatalf("defaultMAC(%s, %q) = %q, want %q", addr, name, got, want)
		}
	}
}
