package handlers

import (
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

var nodeAttrNames = []string{"address", "driver", "artifact", "kernel", "cpus", "memory_mb", "command", "environment",
	"hostname", "attachment", "route", "provisioner", "external_id", "generation", "observation"}

// nodeAttr returns one attribute of a node's reference value.
func nodeAttr(addr addrs.Instance, c NodeConfig, name string) (cty.Value, bool) {
	switch name {
	case "address":
		return cty.StringVal(addr.String()), true
	case "driver":
		return cty.StringVal(c.Driver), true
	case "artifact":
		return optStr(c.Artifact), true
	case "kernel":
		return optStr(c.Kernel), true
	case "cpus":
		return intVal(c.CPUs), true
	case "memory_mb":
		return intVal(c.MemoryMB), true
	case "command":
		return strListVal(c.Command), true
	case "environment":
		return strMapVal(c.Environment), true
	case "hostname":
		return optStr(c.Hostname), true
	case "attachment":
		if len(c.Attachments) == 0 {
			return cty.MapValEmpty(attachmentType), true
		}
		atts := make(map[string]cty.Value, len(c.Attachments))
		for n, a := range c.Attachments {
			atts[n] = cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal(n), "network": cty.StringVal(a.Network), "ipv4": strListVal(a.IPv4),
				"mac": cty.StringVal(a.MAC), "gateway": optStr(a.Gateway), "aliases": strListVal(a.Aliases)})
		}
		return cty.MapVal(atts), true
	case "route":
		if len(c.Routes) == 0 {
			return cty.ListValEmpty(routeType), true
		}
		vs := make([]cty.Value, len(c.Routes))
		for i, r := range c.Routes {
			vs[i] = cty.ObjectVal(map[string]cty.Value{"to": cty.StringVal(r.To), "via": cty.StringVal(r.Via)})
		}
		return cty.ListVal(vs), true
	case "provisioner":
		if len(c.Provisioner) == 0 {
			return cty.ListValEmpty(provisionerType), true
		}
		vs := make([]cty.Value, len(c.Provisioner))
		for i, p := range c.Provisioner {
			vs[i] = cty.ObjectVal(map[string]cty.Value{"type": cty.StringVal(p.Type), "command": strListVal(p.Command)})
		}
		return cty.ListVal(vs), true
	case "external_id", "observation":
		return cty.UnknownVal(cty.String), true
	case "generation":
		return cty.UnknownVal(cty.Number), true
	}
	return cty.NilVal, false
}

func nodeRef(addr addrs.Instance, c NodeConfig) cty.Value {
	return objectOf(nodeAttrNames, func(n string) (cty.Value, bool) { return nodeAttr(addr, c, n) })
}

func objectOf(names []string, get func(string) (cty.Value, bool)) cty.Value {
	m := make(map[string]cty.Value, len(names))
	for _, n := range names {
		m[n], _ = get(n)
	}
	return cty.ObjectVal(m)
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
