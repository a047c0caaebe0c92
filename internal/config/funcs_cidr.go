package config

import (
	"fmt"
	"math/big"
	"net"
	"strings"

	"github.com/apparentlymart/go-cidr/cidr"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/gocty"
)

// lenientIP rewrites the dotted-quad part of an address or prefix so that octets with leading
// zeros ("010") read as decimal. OpenTofu keeps this pre-Go-1.17 parsing for compatibility
// (its cidr functions generate addresses rather than validate them); Go's net package now
// refuses such octets. Anything else is returned unchanged for net to judge.
func lenientIP(s string) string {
	addr, bits, hasBits := strings.Cut(s, "/")
	head, quad := "", addr
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		head, quad = addr[:i+1], addr[i+1:]
	}
	parts := strings.Split(quad, ".")
	if len(parts) != 4 {
		return s
	}
	for i, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return s
		}
		if t := strings.TrimLeft(p, "0"); t != "" {
			parts[i] = t
		} else {
			parts[i] = "0"
		}
	}
	out := head + strings.Join(parts, ".")
	if hasBits {
		out += "/" + bits
	}
	return out
}

func parseCIDR(s string) (*net.IPNet, error) {
	_, n, err := net.ParseCIDR(lenientIP(s))
	if err != nil {
		return nil, fmt.Errorf("invalid CIDR expression: %w", err)
	}
	return n, nil
}

// withLenientPrefix wraps a go-cty-funcs cidr function whose first argument is a prefix so
// that it accepts leading-zero octets like OpenTofu.
func withLenientPrefix(f function.Function) function.Function {
	spec := &function.Spec{
		Description: f.Description(),
		Params:      f.Params(),
		VarParam:    f.VarParam(),
		Type: func(args []cty.Value) (cty.Type, error) {
			return f.ReturnTypeForValues(args)
		},
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			args = append([]cty.Value(nil), args...)
			args[0] = cty.StringVal(lenientIP(args[0].AsString()))
			return f.Call(args)
		},
	}
	return function.New(spec)
}

// cidrHostFunc is go-cty-funcs' cidr.HostFunc reading the prefix leniently. Written out
// rather than wrapped (withLenientPrefix): the wrapper's second Call checked and converted the
// arguments again, a tenth of a count-expanded lab's evaluation.
var cidrHostFunc = function.New(&function.Spec{
	Description: "Calculates a full host IP address within a given IP network address prefix.",
	Params:      []function.Parameter{{Name: "prefix", Type: cty.String}, {Name: "hostnum", Type: cty.Number}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		var hostnum int
		if err := gocty.FromCtyValue(args[1], &hostnum); err != nil {
			return cty.UnknownVal(cty.String), err
		}
		n, err := parseCIDR(args[0].AsString())
		if err != nil {
			return cty.UnknownVal(cty.String), err
		}
		ip, err := cidr.Host(n, hostnum)
		if err != nil {
			return cty.UnknownVal(cty.String), err
		}
		return cty.StringVal(ip.String()), nil
	},
})

var cidrSubnetFunc = function.New(&function.Spec{
	Description: "Calculates subnet netnum of newbits additional bits within prefix.",
	Params:      []function.Parameter{{Name: "prefix", Type: cty.String}, {Name: "newbits", Type: cty.Number}, {Name: "netnum", Type: cty.Number}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		var newbits int
		if err := gocty.FromCtyValue(args[1], &newbits); err != nil {
			return cty.UnknownVal(cty.String), function.NewArgError(1, err)
		}
		netnum, acc := args[2].AsBigFloat().Int(nil)
		if acc != big.Exact {
			return cty.UnknownVal(cty.String), function.NewArgErrorf(2, "netnum must be a whole number")
		}
		n, err := parseCIDR(args[0].AsString())
		if err != nil {
			return cty.UnknownVal(cty.String), function.NewArgError(0, err)
		}
		sub, err := cidr.SubnetBig(n, newbits, netnum)
		if err != nil {
			return cty.UnknownVal(cty.String), err
		}
		return cty.StringVal(sub.String()), nil
	},
})

var cidrNetmaskFunc = function.New(&function.Spec{
	Description: "Returns the dotted netmask of an IPv4 prefix.",
	Params:      []function.Parameter{{Name: "prefix", Type: cty.String}},
	Type:        function.StaticReturnType(cty.String),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		n, err := parseCIDR(args[0].AsString())
		if err != nil {
			return cty.UnknownVal(cty.String), function.NewArgError(0, err)
		}
		if n.IP.To4() == nil {
			return cty.UnknownVal(cty.String), function.NewArgErrorf(0, "IPv6 addresses cannot have a netmask: %s", args[0].AsString())
		}
		return cty.StringVal(net.IP(n.Mask).String()), nil
	},
})

var cidrContainsFunc = function.New(&function.Spec{
	Description: "Reports whether an address or prefix lies within a prefix.",
	Params:      []function.Parameter{{Name: "containing_prefix", Type: cty.String}, {Name: "contained_ip_or_prefix", Type: cty.String}},
	Type:        function.StaticReturnType(cty.Bool),
	Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
		prefix, inner := args[0].AsString(), args[1].AsString()
		_, outer, err := net.ParseCIDR(lenientIP(prefix))
		if err != nil {
			return cty.NilVal, fmt.Errorf("invalid CIDR address: %s", prefix)
		}
		var first, last net.IP
		if ip := net.ParseIP(lenientIP(inner)); ip != nil {
			first, last = ip, ip
		} else if _, in, err := net.ParseCIDR(lenientIP(inner)); err == nil {
			first, last = cidr.AddressRange(in)
		} else {
			return cty.NilVal, fmt.Errorf("invalid IP address or prefix: %s", inner)
		}
		if (outer.IP.To4() == nil) != (first.To4() == nil) {
			return cty.NilVal, fmt.Errorf("address family mismatch: %s vs. %s", prefix, inner)
		}
		return cty.BoolVal(outer.Contains(first) && outer.Contains(last)), nil
	},
})
