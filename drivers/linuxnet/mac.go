package linuxnet

import (
	"crypto/sha256"
	"fmt"
	"net"
	"regexp"

	"zyvor.dev/sysbox/pkg/substrate"
)

// DefaultMAC derives a stable, locally administered unicast MAC from the node's canonical
// address and the logical attachment name, so that a reset (new generation) or a re-create keeps
// the MAC the topology saw first.
func DefaultMAC(nodeAddress, attachment string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("sysbox-mac\x00" + nodeAddress + "\x00" + attachment))
	mac := net.HardwareAddr(append([]byte(nil), sum[:6]...))
	mac[0] = (mac[0] | 0x02) &^ 0x01 // locally administered, unicast
	return mac
}

// BridgeMAC derives the bridge's MAC from its owner: stable, locally administered, unicast.
// CreateBridge sets it explicitly, because a bridge without an assigned address takes the
// lowest MAC of its ports and changes it whenever ports come and go (node create, reset,
// delete); hosts talking to the nodes through it then hold a stale neighbour entry and traffic
// stalls for seconds. An assigned address stays put.
func BridgeMAC(owner substrate.Owner) net.HardwareAddr {
	sum := sha256.Sum256([]byte("sysbox-bridge-mac\x00" + owner.Marker()))
	mac := net.HardwareAddr(append([]byte(nil), sum[:6]...))
	mac[0] = (mac[0] | 0x02) &^ 0x01 // locally administered, unicast
	return mac
}

// ParseMAC parses a unicast MAC; "" yields nil.
func ParseMAC(s string) (net.HardwareAddr, error) {
	if s == "" {
		return nil, nil
	}
	mac, err := net.ParseMAC(s)
	if err != nil || len(mac) != 6 {
		return nil, fmt.Errorf("mac %q: not a 48-bit MAC address", s)
	}
	if mac[0]&0x01 != 0 {
		return nil, fmt.Errorf("mac %q: multicast bit set", s)
	}
	return mac, nil
}

var ifNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// ValidIfName reports whether s is usable as a Linux interface name.
func ValidIfName(s string) bool {
	return ifNameRE.MatchString(s) && s != "." && s != ".." && s != "lo" && s != "all" && s != "default"
}

// IfName derives a deterministic interface name of at most 15 bytes: prefix followed by a hash of
// parts. Names are never ownership proof; markers are.
func IfName(prefix string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	n := 15 - len(prefix)
	if n < 4 {
		n = 4
	}
	return prefix + fmt.Sprintf("%x", h.Sum(nil))[:n]
}

// ParseIPv4Prefix parses "198.51.100.10/24", refusing IPv6.
func ParseIPv4Prefix(s string) (*net.IPNet, error) {
	ip, n, err := net.ParseCIDR(s)
	if err != nil {
		return nil, fmt.Errorf("ipv4 prefix %q: %w", s, err)
	}
	if ip.To4() == nil {
		return nil, fmt.Errorf("ipv4 prefix %q: not IPv4", s)
	}
	return &net.IPNet{IP: ip.To4(), Mask: n.Mask}, nil
}

// ParseIPv4 parses a plain IPv4 address, refusing IPv6.
func ParseIPv4(s string) (net.IP, error) {
	ip := net.ParseIP(s)
	if ip == nil || ip.To4() == nil {
		return nil, fmt.Errorf("ipv4 address %q: not IPv4", s)
	}
	return ip.To4(), nil
}
