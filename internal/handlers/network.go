package handlers

import (
	"encoding/json"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
)

// NetworkConfig is the stored form of sysbox_network.
type NetworkConfig struct {
	Driver   string `json:"driver"`
	IPv4CIDR string `json:"ipv4_cidr"`
	MTU      int    `json:"mtu"`
}

// DefaultNetworkDriver manages networks unless the resource names another driver.
const DefaultNetworkDriver = "netns"

// Network handles sysbox_network.
type Network struct{}

func (*Network) Type() string        { return "sysbox_network" }
func (*Network) Modes() (bool, bool) { return true, false }
func (*Network) SchemaVersion() int  { return 1 }

// Spec implements config.Schema.
func (*Network) Spec() hcldec.Spec { return networkSpec }

var networkSpec = hcldec.ObjectSpec{
	"ipv4_cidr": &hcldec.AttrSpec{Name: "ipv4_cidr", Type: cty.String, Required: true},
	"mtu":       &hcldec.AttrSpec{Name: "mtu", Type: cty.Number},
	"driver":    &hcldec.AttrSpec{Name: "driver", Type: cty.String},
}

// Decode implements config.Schema.
func (*Network) Decode(req *config.DecodeRequest) (*config.Decoded, hcl.Diagnostics) {
	d := newDiags(req)
	v := req.Value
	d.checkSecrets(req)
	c := NetworkConfig{Driver: str(v, "driver"), IPv4CIDR: str(v, "ipv4_cidr")}
	if c.Driver == "" {
		c.Driver = DefaultNetworkDriver
	}
	if p, err := ipv4Prefix(c.IPv4CIDR); err != nil {
		d.add(d.attr("ipv4_cidr"), "Invalid network prefix", "ipv4_cidr: %v", err)
	} else if p.Masked() != p {
		d.add(d.attr("ipv4_cidr"), "Invalid network prefix", "ipv4_cidr %q has host bits set; did you mean %s?", c.IPv4CIDR, p.Masked())
	} else if p.Bits() > 30 {
		d.add(d.attr("ipv4_cidr"), "Invalid network prefix", "ipv4_cidr %q leaves no room for hosts (use /30 or shorter)", c.IPv4CIDR)
	}
	mtu, ok := num(v, "mtu")
	if !ok || (mtu != 0 && (mtu < 68 || mtu > 65535)) {
		d.add(d.attr("mtu"), "Invalid MTU", "mtu must be a whole number from 68 to 65535")
	}
	if mtu == 0 {
		mtu = 1500
	}
	c.MTU = mtu
	if d.list.HasErrors() {
		return nil, d.list
	}
	addr := req.Addr // not req in the closures: req holds the decoded value and body, kept alive as long as the closures
	return &config.Decoded{Config: c, RefFunc: func() cty.Value { return networkRef(addr, c) }}, d.list
}

// Desired implements plans.Handler.
func (*Network) Desired(ri *config.ResourceInstance, _ plans.Facts) (json.RawMessage, error) {
	return storedConfig[NetworkConfig](ri)
}

// Diff implements plans.Handler: a network has no in-place update; any change replaces it.
func (*Network) Diff(prior, desired json.RawMessage) (plans.Diff, error) {
	return diffAttrs(prior, desired, nil, "")
}

// DependencyChanged implements plans.Handler: networks depend on nothing typed.
func (*Network) DependencyChanged(*config.ResourceInstance, addrs.Instance, plans.Action) (plans.Action, string) {
	return plans.NoOp, ""
}

// Requirements implements plans.Handler.
func (*Network) Requirements(attrs json.RawMessage, action plans.Action) (plans.Requirement, error) {
	return driverRequirement(attrs, action, driver.CapManagedNetwork)
}
