package guestagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// NetworkConfig is what "network init" sets up in a guest after its NICs are wired: addresses on
// the interfaces found by MAC, a default gateway and static routes. It is applied with the
// guest's own `ip` command through guest-exec (busybox or iproute2), so any image with a QGA
// agent works, and it is idempotent (`ip addr replace`, `ip route replace`), so a retry or a
// reset may apply it again.
type NetworkConfig struct {
	Interfaces []NetInterface
	Gateway    string  // IPv4 or IPv6 address of the default route; "" for none
	Routes     []Route // static routes
	// IP is the ip command in the guest (default "ip", looked up on the guest's PATH).
	IP string
}

// NetInterface is one guest NIC, found by its MAC.
type NetInterface struct {
	MAC       string
	Addresses []string // CIDR prefixes, e.g. 192.0.2.10/24
	MTU       int      // 0: leave as is
}

// Route is one static route.
type Route struct {
	Destination string // CIDR prefix
	Via         string // next hop
}

// validate checks every input before anything runs in the guest (fail closed).
func (n NetworkConfig) validate() error {
	for i, nic := range n.Interfaces {
		if _, err := net.ParseMAC(nic.MAC); err != nil {
			return fmt.Errorf("network init: interface %d: mac %q: %v", i, nic.MAC, err)
		}
		for _, a := range nic.Addresses {
			if _, err := netip.ParsePrefix(a); err != nil {
				return fmt.Errorf("network init: interface %s: address %q: %v", nic.MAC, a, err)
			}
		}
		if nic.MTU < 0 || nic.MTU > 65535 {
			return fmt.Errorf("network init: interface %s: mtu %d out of range", nic.MAC, nic.MTU)
		}
	}
	if n.Gateway != "" {
		if _, err := netip.ParseAddr(n.Gateway); err != nil {
			return fmt.Errorf("network init: gateway %q: %v", n.Gateway, err)
		}
	}
	for _, r := range n.Routes {
		if _, err := netip.ParsePrefix(r.Destination); err != nil {
			return fmt.Errorf("network init: route destination %q: %v", r.Destination, err)
		}
		if _, err := netip.ParseAddr(r.Via); err != nil {
			return fmt.Errorf("network init: route %s via %q: %v", r.Destination, r.Via, err)
		}
	}
	return nil
}

// Commands returns the argv lists network init runs, given the guest's interfaces.
func (n NetworkConfig) Commands(ifaces []Interface) ([][]string, error) {
	if err := n.validate(); err != nil {
		return nil, err
	}
	ip := n.IP
	if ip == "" {
		ip = "ip"
	}
	byMAC := map[string]string{}
	var seen []string
	for _, i := range ifaces {
		if hw, err := net.ParseMAC(i.HardwareAddress); err == nil {
			byMAC[hw.String()] = i.Name
		}
		seen = append(seen, i.Name+"="+i.HardwareAddress)
	}
	cmds := [][]string{{ip, "link", "set", "dev", "lo", "up"}}
	for _, nic := range n.Interfaces {
		hw, _ := net.ParseMAC(nic.MAC)
		name, ok := byMAC[hw.String()]
		if !ok {
			return nil, fmt.Errorf("network init: no guest interface has mac %s (guest has %s)", hw, strings.Join(seen, ", "))
		}
		up := []string{ip, "link", "set", "dev", name}
		if nic.MTU > 0 {
			up = append(up, "mtu", strconv.Itoa(nic.MTU))
		}
		cmds = append(cmds, append(up, "up"))
		for _, a := range nic.Addresses {
			cmds = append(cmds, []string{ip, "addr", "replace", a, "dev", name})
		}
	}
	if n.Gateway != "" {
		fam := "-4"
		if netip.MustParseAddr(n.Gateway).Is6() {
			fam = "-6"
		}
		cmds = append(cmds, []string{ip, fam, "route", "replace", "default", "via", n.Gateway})
	}
	for _, r := range n.Routes {
		cmds = append(cmds, []string{ip, "route", "replace", r.Destination, "via", r.Via})
	}
	return cmds, nil
}

// ConfigureNetwork applies cfg in the guest: it finds each NIC by MAC through
// guest-network-get-interfaces, then runs the ip commands one by one, stopping at the first
// failure (named with its argv and stderr).
func (c *Client) ConfigureNetwork(ctx context.Context, cfg NetworkConfig) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	ifaces, err := c.Interfaces(ctx)
	if err != nil {
		return fmt.Errorf("network init: %w", err)
	}
	cmds, err := cfg.Commands(ifaces)
	if err != nil {
		return err
	}
	for _, argv := range cmds {
		if _, err := c.Run(ctx, argv...); err != nil {
			return fmt.Errorf("network init: %w", err)
		}
	}
	return nil
}
