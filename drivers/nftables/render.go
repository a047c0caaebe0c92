package nftables

import (
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"strings"

	nft "github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/pkg/substrate"
)

// chainSpec is one chain as the driver means it; ruleset is the table's content.
type chainSpec struct {
	Name     string
	Type     nft.ChainType
	Hook     *nft.ChainHook
	Priority *nft.ChainPriority
	Policy   *nft.ChainPolicy
	Rules    [][]expr.Any
}

const ownerChain = "owner"

// render turns a policy into chains, resolving attachments through devs (logical name →
// interface name inside the node). It is pure.
func render(spec substrate.PolicySpec, devs map[string]string) ([]chainSpec, error) {
	var chains []chainSpec
	if spec.Firewall == nil && spec.Router == nil {
		return nil, fmt.Errorf("policy %s: neither firewall nor router", spec.Owner.Address)
	}
	if fw := spec.Firewall; fw != nil {
		hooks := []struct {
			name   string
			hook   *nft.ChainHook
			policy string
		}{
			{"input", nft.ChainHookInput, fw.DefaultInput},
			{"forward", nft.ChainHookForward, fw.DefaultForward},
			{"output", nft.ChainHookOutput, fw.DefaultOutput},
		}
		for _, h := range hooks {
			pol, err := policy(h.policy)
			if err != nil {
				return nil, fmt.Errorf("firewall %s: default_%s: %w", spec.Owner.Address, h.name, err)
			}
			c := chainSpec{Name: h.name, Type: nft.ChainTypeFilter, Hook: h.hook, Priority: nft.ChainPriorityFilter, Policy: &pol}
			c.Rules = append(c.Rules, append(ctEstablished(), counter(), verdict(expr.VerdictAccept)))
			switch h.name {
			case "input":
				c.Rules = append(c.Rules, append(ifname(expr.MetaKeyIIFNAME, "lo"), counter(), verdict(expr.VerdictAccept)))
			case "output":
				c.Rules = append(c.Rules, append(ifname(expr.MetaKeyOIFNAME, "lo"), counter(), verdict(expr.VerdictAccept)))
			}
			for i, r := range fw.Rules {
				if r.Chain != h.name {
					continue
				}
				exprs, err := ruleExprs(r, devs)
				if err != nil {
					return nil, fmt.Errorf("firewall %s: rule %d: %w", spec.Owner.Address, i+1, err)
				}
				c.Rules = append(c.Rules, exprs)
			}
			chains = append(chains, c)
		}
		for i, r := range fw.Rules {
			if r.Chain != "input" && r.Chain != "forward" && r.Chain != "output" {
				return nil, fmt.Errorf("firewall %s: rule %d: chain %q is not input, forward or output", spec.Owner.Address, i+1, r.Chain)
			}
		}
	}
	if rt := spec.Router; rt != nil {
		accept := nft.ChainPolicyAccept
		pre := chainSpec{Name: "prerouting", Type: nft.ChainTypeNAT, Hook: nft.ChainHookPrerouting, Priority: nft.ChainPriorityNATDest, Policy: &accept}
		post := chainSpec{Name: "postrouting", Type: nft.ChainTypeNAT, Hook: nft.ChainHookPostrouting, Priority: nft.ChainPriorityNATSource, Policy: &accept}
		for i, pf := range rt.PortForwards {
			exprs, err := dnatExprs(pf, devs)
			if err != nil {
				return nil, fmt.Errorf("router %s: port_forward %d: %w", spec.Owner.Address, i+1, err)
			}
			pre.Rules = append(pre.Rules, exprs)
		}
		for i, m := range rt.Masquerade {
			dev, ok := devs[m.OutAttachment]
			if !ok {
				return nil, fmt.Errorf("router %s: masquerade %d: attachment %q not found on the node", spec.Owner.Address, i+1, m.OutAttachment)
			}
			exprs := ifname(expr.MetaKeyOIFNAME, dev)
			if m.Source != "" {
				src, err := cidrMatch(12, m.Source)
				if err != nil {
					return nil, fmt.Errorf("router %s: masquerade %d: source: %w", spec.Owner.Address, i+1, err)
				}
				exprs = append(exprs, src...)
			}
			post.Rules = append(post.Rules, append(exprs, counter(), &expr.Masq{}))
		}
		chains = append(chains, pre, post)
	}
	chains = append(chains, chainSpec{Name: ownerChain, Rules: [][]expr.Any{{verdict(expr.VerdictReturn)}}})
	return chains, nil
}

func policy(s string) (nft.ChainPolicy, error) {
	switch s {
	case "", "accept":
		return nft.ChainPolicyAccept, nil
	case "drop":
		return nft.ChainPolicyDrop, nil
	}
	return 0, fmt.Errorf("%q is not accept or drop", s)
}

func ruleExprs(r substrate.Rule, devs map[string]string) ([]expr.Any, error) {
	var out []expr.Any
	if r.Attachment != "" {
		dev, ok := devs[r.Attachment]
		if !ok {
			return nil, fmt.Errorf("attachment %q not found on the node", r.Attachment)
		}
		key := expr.MetaKeyIIFNAME
		if r.Chain == "output" {
			key = expr.MetaKeyOIFNAME
		}
		out = append(out, ifname(key, dev)...)
	}
	proto, err := l4proto(r.Protocol)
	if err != nil {
		return nil, err
	}
	if proto != 0 {
		out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}})
	}
	if r.Source != "" {
		m, err := cidrMatch(12, r.Source)
		if err != nil {
			return nil, fmt.Errorf("source: %w", err)
		}
		out = append(out, m...)
	}
	if r.Destination != "" {
		m, err := cidrMatch(16, r.Destination)
		if err != nil {
			return nil, fmt.Errorf("destination: %w", err)
		}
		out = append(out, m...)
	}
	if r.SourcePort != 0 || r.DestinationPort != 0 {
		if proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_UDP {
			return nil, fmt.Errorf("ports need protocol tcp or udp, not %q", r.Protocol)
		}
		if r.SourcePort != 0 {
			p, err := port(r.SourcePort)
			if err != nil {
				return nil, err
			}
			out = append(out, portMatch(0, p)...)
		}
		if r.DestinationPort != 0 {
			p, err := port(r.DestinationPort)
			if err != nil {
				return nil, err
			}
			out = append(out, portMatch(2, p)...)
		}
	}
	out = append(out, counter())
	switch r.Action {
	case "accept":
		out = append(out, verdict(expr.VerdictAccept))
	case "drop":
		out = append(out, verdict(expr.VerdictDrop))
	case "reject":
		if proto == unix.IPPROTO_TCP {
			out = append(out, &expr.Reject{Type: unix.NFT_REJECT_TCP_RST})
		} else {
			out = append(out, &expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: 3}) // port unreachable
		}
	default:
		return nil, fmt.Errorf("action %q is not accept, drop or reject", r.Action)
	}
	return out, nil
}

func dnatExprs(pf substrate.PortForward, devs map[string]string) ([]expr.Any, error) {
	dev, ok := devs[pf.InAttachment]
	if !ok {
		return nil, fmt.Errorf("attachment %q not found on the node", pf.InAttachment)
	}
	proto, err := l4proto(pf.Protocol)
	if err != nil || (proto != unix.IPPROTO_TCP && proto != unix.IPPROTO_UDP) {
		return nil, fmt.Errorf("protocol %q: want tcp or udp", pf.Protocol)
	}
	p, err := port(pf.Port)
	if err != nil {
		return nil, err
	}
	host, portStr, err := net.SplitHostPort(pf.To)
	if err != nil {
		return nil, fmt.Errorf("to %q: want IPv4:port: %w", pf.To, err)
	}
	ip := net.ParseIP(host).To4()
	if ip == nil {
		return nil, fmt.Errorf("to %q: not an IPv4 address", pf.To)
	}
	tp, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("to %q: port: %w", pf.To, err)
	}
	toPort, err := port(tp)
	if err != nil {
		return nil, fmt.Errorf("to %q: %w", pf.To, err)
	}
	out := ifname(expr.MetaKeyIIFNAME, dev)
	out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}})
	out = append(out, portMatch(2, p)...)
	out = append(out, counter(),
		&expr.Immediate{Register: 1, Data: []byte(ip)},
		&expr.Immediate{Register: 2, Data: be16(toPort)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 1, RegProtoMin: 2, RegProtoMax: 2, Specified: true},
	)
	return out, nil
}

func l4proto(s string) (byte, error) {
	switch strings.ToLower(s) {
	case "", "any":
		return 0, nil
	case "tcp":
		return unix.IPPROTO_TCP, nil
	case "udp":
		return unix.IPPROTO_UDP, nil
	case "icmp":
		return unix.IPPROTO_ICMP, nil
	}
	return 0, fmt.Errorf("protocol %q is not tcp, udp, icmp or any", s)
}

func port(p int) (uint16, error) {
	if p < 1 || p > 65535 {
		return 0, fmt.Errorf("port %d out of range 1..65535", p)
	}
	return uint16(p), nil
}

func be16(p uint16) []byte {
	b := make([]byte, 2)
	binary.BigEndian.PutUint16(b, p)
	return b
}

func ifname(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, 16)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b}}
}

// cidrMatch matches the IPv4 header field at offset (12 saddr, 16 daddr) against an IPv4 CIDR.
func cidrMatch(offset uint32, cidr string) ([]expr.Any, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		if ip := net.ParseIP(cidr); ip != nil && ip.To4() != nil {
			n = &net.IPNet{IP: ip.To4(), Mask: net.CIDRMask(32, 32)}
		} else {
			return nil, fmt.Errorf("%q is not an IPv4 CIDR", cidr)
		}
	}
	if n.IP.To4() == nil {
		return nil, fmt.Errorf("%q is IPv6; only IPv4 is supported", cidr)
	}
	ones, _ := n.Mask.Size()
	if ones == 0 {
		return nil, nil
	}
	out := []expr.Any{&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4}}
	if ones < 32 {
		out = append(out, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: []byte(n.Mask), Xor: []byte{0, 0, 0, 0}})
	}
	return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(n.IP.To4())}), nil
}

func portMatch(offset uint32, p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: offset, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: be16(p)},
	}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED),
			Xor:  []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

func counter() expr.Any { return &expr.Counter{} }

func verdict(k expr.VerdictKind) expr.Any { return &expr.Verdict{Kind: k} }
