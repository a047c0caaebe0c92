package handlers

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/pkg/substrate"
)

// DefaultPolicyDriver applies firewall and router policy unless the resource names another.
const DefaultPolicyDriver = "nftables"

// FirewallConfig is the stored form of sysbox_firewall.
type FirewallConfig struct {
	Driver string `json:"driver"`
	Node   string `json:"node"` // canonical address of the sysbox_node
	substrate.Firewall
	// PolicyDigest is the semantic digest of the desired policy (S9).
	PolicyDigest string `json:"policy_digest"`
}

// RouterConfig is the stored form of sysbox_router.
type RouterConfig struct {
	Driver string `json:"driver"`
	Node   string `json:"node"`
	substrate.Router
	PolicyDigest string `json:"policy_digest"`
}

// PolicySpec returns the neutral policy for the executor (the owner is filled in there).
func (c FirewallConfig) PolicySpec() substrate.PolicySpec {
	f := c.Firewall
	return substrate.PolicySpec{Firewall: &f}
}

// PolicySpec returns the neutral policy for the executor.
func (c RouterConfig) PolicySpec() substrate.PolicySpec {
	r := c.Router
	return substrate.PolicySpec{Router: &r}
}

// policyRules: the node and driver force replacement; the policy itself is updated in place,
// because the Policy capability replaces the topology-owned table atomically.
var policyRules = map[string]attrRule{
	"driver":          {effect: plans.ForcesReplacement, why: "policy cannot move between drivers"},
	"node":            {effect: plans.ForcesReplacement, why: "the policy table lives in the node"},
	"policy_digest":   {effect: plans.InPlace, why: "the table is replaced atomically"},
	"default_input":   {effect: plans.InPlace},
	"default_forward": {effect: plans.InPlace},
	"default_output":  {effect: plans.InPlace},
	"rules":           {effect: plans.InPlace},
	"masquerade":      {effect: plans.InPlace},
	"port_forwards":   {effect: plans.InPlace},
}

// policyNode reads and checks the `node` reference, returning its attachment names when known.
func policyNode(d *diags, v cty.Value) (string, []config.Reference, map[string]bool) {
	a, obj, ok := ref(d, v, "node", "sysbox_node", d.attr("node"))
	if !ok {
		if !d.list.HasErrors() {
			d.add(d.attr("node"), "Missing node", "node must refer to a sysbox_node")
		}
		return "", nil, nil
	}
	var atts map[string]bool
	if obj != cty.NilVal && obj.Type().HasAttribute("attachment") {
		atts = map[string]bool{}
		if av := obj.GetAttr("attachment"); !av.IsNull() && av.IsKnown() {
			for it := av.ElementIterator(); it.Next(); {
				k, _ := it.Element()
				atts[k.AsString()] = true
			}
		}
	}
	return a.String(), []config.Reference{{Addr: a, Attr: "node", Range: d.attr("node")}}, atts
}

func checkAttachment(d *diags, rng hcl.Range, what, name string, atts map[string]bool) {
	if name == "" || atts == nil || atts[name] {
		return
	}
	known := slices.Sorted(maps.Keys(atts)) // sorted: in map order the message changed from run to run
	d.add(rng, "Unknown attachment", "%s: the node has no attachment %q (it has %v)", what, name, known)
}

// cidrOrAddr accepts an IPv4 address or prefix; IPv6 is a validation error (S9).
func cidrOrAddr(s string) error {
	if s == "" {
		return nil
	}
	if strings.Contains(s, "/") {
		_, err := ipv4Prefix(s)
		return err
	}
	_, err := ipv4Addr(s)
	return err
}

// Firewall handles sysbox_firewall.
type Firewall struct{}

func (*Firewall) Type() string        { return "sysbox_firewall" }
func (*Firewall) Modes() (bool, bool) { return true, false }
func (*Firewall) SchemaVersion() int  { return 1 }

// Spec implements config.Schema.
func (*Firewall) Spec() hcldec.Spec { return firewallSpec }

var firewallSpec = hcldec.ObjectSpec{
	"node":            &hcldec.AttrSpec{Name: "node", Type: cty.DynamicPseudoType, Required: true},
	"driver":          &hcldec.AttrSpec{Name: "driver", Type: cty.String},
	"default_input":   &hcldec.AttrSpec{Name: "default_input", Type: cty.String},
	"default_forward": &hcldec.AttrSpec{Name: "default_forward", Type: cty.String},
	"default_output":  &hcldec.AttrSpec{Name: "default_output", Type: cty.String},
	"rule": &hcldec.BlockListSpec{TypeName: "rule", Nested: hcldec.ObjectSpec{
		"chain":            &hcldec.AttrSpec{Name: "chain", Type: cty.String, Required: true},
		"action":           &hcldec.AttrSpec{Name: "action", Type: cty.String, Required: true},
		"protocol":         &hcldec.AttrSpec{Name: "protocol", Type: cty.String},
		"source":           &hcldec.AttrSpec{Name: "source", Type: cty.String},
		"destination":      &hcldec.AttrSpec{Name: "destination", Type: cty.String},
		"source_port":      &hcldec.AttrSpec{Name: "source_port", Type: cty.Number},
		"destination_port": &hcldec.AttrSpec{Name: "destination_port", Type: cty.Number},
		"attachment":       &hcldec.AttrSpec{Name: "attachment", Type: cty.String},
	}},
}

// Decode implements config.Schema.
func (*Firewall) Decode(req *config.DecodeRequest) (*config.Decoded, hcl.Diagnostics) {
	d := newDiags(req)
	v := req.Value
	d.checkSecrets(req)
	c := FirewallConfig{Driver: str(v, "driver")}
	if c.Driver == "" {
		c.Driver = DefaultPolicyDriver
	}
	node, refs, atts := policyNode(d, v)
	c.Node = node
	def := func(name string) string {
		s := str(v, name)
		if s == "" {
			s = "accept"
		}
		if !oneOf(s, "accept", "drop") {
			d.add(d.attr(name), "Invalid default policy", "%s must be accept or drop, got %q", name, s)
		}
		return s
	}
	c.DefaultInput, c.DefaultForward, c.DefaultOutput = def("default_input"), def("default_forward"), def("default_output")
	if rs := v.GetAttr("rule"); !rs.IsNull() {
		i := 0
		for it := rs.ElementIterator(); it.Next(); i++ {
			_, rv := it.Element()
			r := substrate.Rule{Chain: str(rv, "chain"), Action: str(rv, "action"), Protocol: str(rv, "protocol"),
				Source: str(rv, "source"), Destination: str(rv, "destination"), Attachment: str(rv, "attachment")}
			if r.Protocol == "" {
				r.Protocol = "any"
			}
			what := "rule " + strconv.Itoa(i)
			if !oneOf(r.Chain, "input", "forward", "output") {
				d.add(d.block("rule", "", i, "chain"), "Invalid rule", "%s: chain must be input, forward or output, got %q", what, r.Chain)
			}
			if !oneOf(r.Action, "accept", "drop", "reject") {
				d.add(d.block("rule", "", i, "action"), "Invalid rule", "%s: action must be accept, drop or reject, got %q", what, r.Action)
			}
			if !oneOf(r.Protocol, "tcp", "udp", "icmp", "any") {
				d.add(d.block("rule", "", i, "protocol"), "Invalid rule", "%s: protocol must be tcp, udp, icmp or any, got %q", what, r.Protocol)
			}
			for _, f := range []struct{ name, val string }{{"source", r.Source}, {"destination", r.Destination}} {
				if err := cidrOrAddr(f.val); err != nil {
					d.add(d.block("rule", "", i, f.name), "Invalid rule address", "%s: %s: %v", what, f.name, err)
				}
			}
			for _, f := range []struct {
				name string
				dst  *int
			}{{"source_port", &r.SourcePort}, {"destination_port", &r.DestinationPort}} {
				p, ok := num(rv, f.name)
				if !ok || p < 0 || p > 65535 {
					d.add(d.block("rule", "", i, f.name), "Invalid port", "%s: %s must be from 1 to 65535", what, f.name)
				} else if p != 0 && !oneOf(r.Protocol, "tcp", "udp") {
					d.add(d.block("rule", "", i, f.name), "Invalid port", "%s: %s needs protocol tcp or udp", what, f.name)
				}
				*f.dst = p
			}
			if r.Attachment != "" && r.Chain == "output" {
				d.add(d.block("rule", "", i, "attachment"), "Invalid rule", "%s: attachment selects incoming traffic; it is not valid on the output chain", what)
			}
			checkAttachment(d, d.block("rule", "", i, "attachment"), what, r.Attachment, atts)
			c.Rules = append(c.Rules, r)
		}
	}
	if d.list.HasErrors() {
		return nil, d.list
	}
	c.PolicyDigest = c.PolicySpec().Digest()
	addr := req.Addr // not req in the closures: req holds the decoded value and body, kept alive as long as the closures
	return &config.Decoded{Config: c, RefFunc: func() cty.Value { return policyRef(addr, c.Driver, c.Node, c.PolicyDigest) }, References: refs}, d.list
}

// Desired implements plans.Handler.
func (*Firewall) Desired(ri *config.ResourceInstance, _ plans.Facts) (json.RawMessage, error) {
	return storedConfig[FirewallConfig](ri)
}

// Diff implements plans.Handler.
func (*Firewall) Diff(prior, desired json.RawMessage) (plans.Diff, error) {
	return diffAttrs(prior, desired, policyRules, "policy table replaced atomically in place")
}

// DependencyChanged implements plans.Handler: a replaced node loses its table, so the policy
// is replaced with it.
func (*Firewall) DependencyChanged(ri *config.ResourceInstance, dep addrs.Instance, a plans.Action) (plans.Action, string) {
	c, ok := ri.Config.(FirewallConfig)
	return policyDepChanged(ok, c.Node, dep, a)
}

func policyDepChanged(ok bool, node string, dep addrs.Instance, a plans.Action) (plans.Action, string) {
	if !ok || dep.String() != node || (a != plans.Replace && a != plans.Create) {
		return plans.NoOp, ""
	}
	return plans.Replace, fmt.Sprintf("node %s is %s; its policy table goes with it", node, map[plans.Action]string{plans.Replace: "replaced", plans.Create: "recreated"}[a])
}

// Requirements implements plans.Handler.
func (*Firewall) Requirements(attrs json.RawMessage, action plans.Action) (plans.Requirement, error) {
	return driverRequirement(attrs, action, driver.CapPolicy)
}

// Router handles sysbox_router: forwarding plus NAT on a node (S9).
type Router struct{}

func (*Router) Type() string        { return "sysbox_router" }
func (*Router) Modes() (bool, bool) { return true, false }
func (*Router) SchemaVersion() int  { return 1 }

// Spec implements config.Schema.
func (*Router) Spec() hcldec.Spec { return routerSpec }

var routerSpec = hcldec.ObjectSpec{
	"node":   &hcldec.AttrSpec{Name: "node", Type: cty.DynamicPseudoType, Required: true},
	"driver": &hcldec.AttrSpec{Name: "driver", Type: cty.String},
	"masquerade": &hcldec.BlockListSpec{TypeName: "masquerade", Nested: hcldec.ObjectSpec{
		"out_attachment": &hcldec.AttrSpec{Name: "out_attachment", Type: cty.String, Required: true},
		"source":         &hcldec.AttrSpec{Name: "source", Type: cty.String, Required: true},
	}},
	"port_forward": &hcldec.BlockListSpec{TypeName: "port_forward", Nested: hcldec.ObjectSpec{
		"in_attachment": &hcldec.AttrSpec{Name: "in_attachment", Type: cty.String, Required: true},
		"protocol":      &hcldec.AttrSpec{Name: "protocol", Type: cty.String, Required: true},
		"port":          &hcldec.AttrSpec{Name: "port", Type: cty.Number, Required: true},
		"to":            &hcldec.AttrSpec{Name: "to", Type: cty.String, Required: true},
	}},
}

// Decode implements config.Schema.
func (*Router) Decode(req *config.DecodeRequest) (*config.Decoded, hcl.Diagnostics) {
	d := newDiags(req)
	v := req.Value
	d.checkSecrets(req)
	c := RouterConfig{Driver: str(v, "driver")}
	if c.Driver == "" {
		c.Driver = DefaultPolicyDriver
	}
	node, refs, atts := policyNode(d, v)
	c.Node = node
	if ms := v.GetAttr("masquerade"); !ms.IsNull() {
		i := 0
		for it := ms.ElementIterator(); it.Next(); i++ {
			_, mv := it.Element()
			m := substrate.Masquerade{OutAttachment: str(mv, "out_attachment"), Source: str(mv, "source")}
			what := "masquerade " + strconv.Itoa(i)
			if _, err := ipv4Prefix(m.Source); err != nil {
				d.add(d.block("masquerade", "", i, "source"), "Invalid masquerade", "%s: source: %v", what, err)
			}
			checkAttachment(d, d.block("masquerade", "", i, "out_attachment"), what, m.OutAttachment, atts)
			c.Masquerade = append(c.Masquerade, m)
		}
	}
	if ps := v.GetAttr("port_forward"); !ps.IsNull() {
		i := 0
		for it := ps.ElementIterator(); it.Next(); i++ {
			_, pv := it.Element()
			p := substrate.PortForward{InAttachment: str(pv, "in_attachment"), Protocol: str(pv, "protocol"), To: str(pv, "to")}
			what := "port_forward " + strconv.Itoa(i)
			if !oneOf(p.Protocol, "tcp", "udp") {
				d.add(d.block("port_forward", "", i, "protocol"), "Invalid port_forward", "%s: protocol must be tcp or udp, got %q", what, p.Protocol)
			}
			port, ok := num(pv, "port")
			if !ok || port < 1 || port > 65535 {
				d.add(d.block("port_forward", "", i, "port"), "Invalid port_forward", "%s: port must be from 1 to 65535", what)
			}
			p.Port = port
			if ap, err := netip.ParseAddrPort(p.To); err != nil {
				d.add(d.block("port_forward", "", i, "to"), "Invalid port_forward", "%s: to %q must be IPv4ADDRESS:PORT", what, p.To)
			} else if !ap.Addr().Is4() {
				d.add(d.block("port_forward", "", i, "to"), "Invalid port_forward", "%s: to %q is IPv6; sysbox supports IPv4 only here", what, p.To)
			}
			checkAttachment(d, d.block("port_forward", "", i, "in_attachment"), what, p.InAttachment, atts)
			c.PortForwards = append(c.PortForwards, p)
		}
	}
	if d.list.HasErrors() {
		return nil, d.list
	}
	c.PolicyDigest = c.PolicySpec().Digest()
	addr := req.Addr // not req in the closures: req holds the decoded value and body, kept alive as long as the closures
	return &config.Decoded{Config: c, RefFunc: func() cty.Value { return policyRef(addr, c.Driver, c.Node, c.PolicyDigest) }, References: refs}, d.list
}

// Desired implements plans.Handler.
func (*Router) Desired(ri *config.ResourceInstance, _ plans.Facts) (json.RawMessage, error) {
	return storedConfig[RouterConfig](ri)
}

// Diff implements plans.Handler.
func (*Router) Diff(prior, desired json.RawMessage) (plans.Diff, error) {
	return diffAttrs(prior, desired, policyRules, "policy table replaced atomically in place")
}

// DependencyChanged implements plans.Handler.
func (*Router) DependencyChanged(ri *config.ResourceInstance, dep addrs.Instance, a plans.Action) (plans.Action, string) {
	c, ok := ri.Config.(RouterConfig)
	return policyDepChanged(ok, c.Node, dep, a)
}

// Requirements implements plans.Handler.
func (*Router) Requirements(attrs json.RawMessage, action plans.Action) (plans.Requirement, error) {
	return driverRequirement(attrs, action, driver.CapPolicy)
}

// RepairsInPlace implements plans.InPlaceRepairer: drifted policy is re-applied atomically.
func (*Firewall) RepairsInPlace() bool { return true }

// RepairsInPlace implements plans.InPlaceRepairer.
func (*Router) RepairsInPlace() bool { return true }

var (
	_ plans.InPlaceRepairer = (*Firewall)(nil)
	_ plans.InPlaceRepairer = (*Router)(nil)
)
