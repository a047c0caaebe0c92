package handlers

import (
	"sort"

	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
)

// The values other expressions see when they reference an instance, built directly (no JSON
// round trip: this runs once per instance and dominates large topologies otherwise). Optional
// attributes that are unset are null, never missing; computed attributes are unknown.

func optStr(s string) cty.Value {
	if s == "" {
		return cty.NullVal(cty.String)
	}
	return cty.StringVal(s)
}

func strListVal(ss []string) cty.Value {
	if len(ss) == 0 {
		return cty.ListValEmpty(cty.String)
	}
	vs := make([]cty.Value, len(ss))
	for i, s := range ss {
		vs[i] = cty.StringVal(s)
	}
	return cty.ListVal(vs)
}

func strMapVal(m map[string]string) cty.Value {
	if len(m) == 0 {
		return cty.MapValEmpty(cty.String)
	}
	vs := make(map[string]cty.Value, len(m))
	for k, v := range m {
		vs[k] = cty.StringVal(v)
	}
	return cty.MapVal(vs)
}

func intVal(i int) cty.Value { return cty.NumberIntVal(int64(i)) }

var (
	attachmentType  = cty.Object(map[string]cty.Type{"name": cty.String, "network": cty.String, "ipv4": cty.List(cty.String), "mac": cty.String, "gateway": cty.String, "aliases": cty.List(cty.String)})
	routeType       = cty.Object(map[string]cty.Type{"to": cty.String, "via": cty.String})
	provisionerType = cty.Object(map[string]cty.Type{"type": cty.String, "command": cty.List(cty.String)})
)

func nodeRef(addr addrs.Instance, c NodeConfig) cty.Value {
	atts := make(map[string]cty.Value, len(c.Attachments))
	names := make([]string, 0, len(c.Attachments))
	for n := range c.Attachments {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		a := c.Attachments[n]
		atts[n] = cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal(n), "network": cty.StringVal(a.Network), "ipv4": strListVal(a.IPv4),
			"mac": cty.StringVal(a.MAC), "gateway": optStr(a.Gateway), "aliases": strListVal(a.Aliases)})
	}
	attachment := cty.MapValEmpty(attachmentType)
	if len(atts) > 0 {
		attachment = cty.MapVal(atts)
	}
	routes := cty.ListValEmpty(routeType)
	if len(c.Routes) > 0 {
		vs := make([]cty.Value, len(c.Routes))
		for i, r := range c.Routes {
			vs[i] = cty.ObjectVal(map[string]cty.Value{"to": cty.StringVal(r.To), "via": cty.StringVal(r.Via)})
		}
		routes = cty.ListVal(vs)
	}
	provs := cty.ListValEmpty(provisionerType)
	if len(c.Provisioner) > 0 {
		vs := make([]cty.Value, len(c.Provisioner))
		for i, p := range c.Provisioner {
			vs[i] = cty.ObjectVal(map[string]cty.Value{"type": cty.StringVal(p.Type), "command": strListVal(p.Command)})
		}
		provs = cty.ListVal(vs)
	}
	return cty.ObjectVal(map[string]cty.Value{
		"address":     cty.StringVal(addr.String()),
		"driver":      cty.StringVal(c.Driver),
		"artifact":    optStr(c.Artifact),
		"kernel":      optStr(c.Kernel),
		"cpus":        intVal(c.CPUs),
		"memory_mb":   intVal(c.MemoryMB),
		"command":     strListVal(c.Command),
		"environment": strMapVal(c.Environment),
		"hostname":    optStr(c.Hostname),
		"attachment":  attachment,
		"route":       routes,
		"provisioner": provs,
		"external_id": cty.UnknownVal(cty.String),
		"generation":  cty.UnknownVal(cty.Number),
		"observation": cty.UnknownVal(cty.String),
	})
}

func networkRef(addr addrs.Instance, c NetworkConfig) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{
		"address":     cty.StringVal(addr.String()),
		"driver":      cty.StringVal(c.Driver),
		"ipv4_cidr":   cty.StringVal(c.IPv4CIDR),
		"mtu":         intVal(c.MTU),
		"external_id": cty.UnknownVal(cty.String),
	})
}

func artifactRef(addr addrs.Instance, c ArtifactConfig) cty.Value {
	digest := cty.UnknownVal(cty.String)
	if c.Pinned != "" {
		digest = cty.StringVal(c.Pinned)
	}
	return cty.ObjectVal(map[string]cty.Value{
		"address":      cty.StringVal(addr.String()),
		"driver":       cty.StringVal(c.Driver),
		"kind":         cty.StringVal(c.Kind),
		"source":       cty.StringVal(c.Source),
		"architecture": cty.StringVal(c.Architecture),
		"guest_family": cty.StringVal(c.GuestFamily),
		"digest":       digest,
		"size":         cty.UnknownVal(cty.Number),
	})
}

func policyRef(addr addrs.Instance, driver, node, digest string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{
		"address":       cty.StringVal(addr.String()),
		"driver":        cty.StringVal(driver),
		"node":          cty.StringVal(node),
		"policy_digest": cty.StringVal(digest),
	})
}
