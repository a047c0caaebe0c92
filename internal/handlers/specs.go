package handlers

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/specs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Each handler tells the executor, through the registry, what its resource is: its kind and
// the driver-neutral spec of its stored attributes (the plan's After, or state's attributes).

func (*Artifact) Kind() specs.Kind { return specs.KindArtifact }
func (*Network) Kind() specs.Kind  { return specs.KindNetwork }
func (*Node) Kind() specs.Kind     { return specs.KindNode }
func (*Firewall) Kind() specs.Kind { return specs.KindPolicy }
func (*Router) Kind() specs.Kind   { return specs.KindPolicy }

// DriverSpec implements Handler.
func (*Artifact) DriverSpec(attrs json.RawMessage, _ specs.Refs) (specs.Desired, error) {
	var c ArtifactConfig
	if err := json.Unmarshal(attrs, &c); err != nil {
		return specs.Desired{}, err
	}
	// Pin the digest the plan saw: content changed since planning fails the apply (S5).
	return specs.Desired{
		Artifact: &substrate.ArtifactSpec{Kind: c.Kind, Source: c.Source, BaseDir: c.BaseDir,
			Architecture: c.Architecture, GuestFamily: c.GuestFamily, Digest: c.Digest},
		Identity: &substrate.ArtifactIdentity{Kind: c.Kind, Source: c.Source, Architecture: c.Architecture,
			GuestFamily: c.GuestFamily, Size: c.Size, Digest: c.Digest},
	}, nil
}

// DriverSpec implements Handler.
func (*Network) DriverSpec(attrs json.RawMessage, _ specs.Refs) (specs.Desired, error) {
	var c NetworkConfig
	if err := json.Unmarshal(attrs, &c); err != nil {
		return specs.Desired{}, err
	}
	return specs.Desired{Network: &substrate.NetworkSpec{IPv4CIDR: c.IPv4CIDR, MTU: c.MTU}}, nil
}

// DriverSpec implements Handler.
func (*Node) DriverSpec(attrs json.RawMessage, refs specs.Refs) (specs.Desired, error) {
	var c NodeConfig
	if err := json.Unmarshal(attrs, &c); err != nil {
		return specs.Desired{}, err
	}
	n := &specs.NodeSpec{Spec: substrate.NodeSpec{Driver: c.Driver, CPUs: c.CPUs, MemoryMB: c.MemoryMB,
		Command: c.Command, Hostname: c.Hostname}, Environment: c.Environment}
	var err error
	if n.Spec.Artifact, n.ArtifactFrom, err = specArtifact(c.Artifact, refs); err != nil {
		return specs.Desired{}, err
	}
	if n.Spec.Kernel, n.KernelFrom, err = specArtifact(c.Kernel, refs); err != nil {
		return specs.Desired{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(c.Attachments)) {
		at := c.Attachments[name]
		if at == nil {
			return specs.Desired{}, fmt.Errorf("attachment %q: null", name)
		}
		na, err := addrs.ParseInstance(at.Network)
		if err != nil {
			return specs.Desired{}, fmt.Errorf("attachment %q: network: %w", name, err)
		}
		n.Attachments = append(n.Attachments, specs.Attachment{Name: name, Network: na, IPv4: at.IPv4, MAC: at.MAC,
			Gateway: at.Gateway, Aliases: at.Aliases})
	}
	for _, r := range c.Routes {
		n.Routes = append(n.Routes, substrate.Route{To: r.To, Via: r.Via})
	}
	for _, p := range c.Provisioner {
		n.Provisioners = append(n.Provisioners, p.Command)
	}
	return specs.Desired{Node: n}, nil
}

// specArtifact resolves an artifact reference ("" for none) to its identity.
func specArtifact(ref string, refs specs.Refs) (*substrate.ArtifactIdentity, *addrs.Instance, error) {
	if ref == "" {
		return nil, nil, nil
	}
	addr, err := addrs.ParseInstance(ref)
	if err != nil {
		return nil, nil, fmt.Errorf("artifact %q: %w", ref, err)
	}
	if refs == nil {
		return nil, nil, fmt.Errorf("artifact %s: no references to resolve it against", ref)
	}
	id, err := refs.Artifact(addr)
	if err != nil {
		return nil, nil, err
	}
	return id, &addr, nil
}

// DriverSpec implements Handler.
func (*Firewall) DriverSpec(attrs json.RawMessage, _ specs.Refs) (specs.Desired, error) {
	var c FirewallConfig
	if err := json.Unmarshal(attrs, &c); err != nil {
		return specs.Desired{}, err
	}
	return policyDesired(c.Node, c.PolicySpec())
}

// DriverSpec implements Handler.
func (*Router) DriverSpec(attrs json.RawMessage, _ specs.Refs) (specs.Desired, error) {
	var c RouterConfig
	if err := json.Unmarshal(attrs, &c); err != nil {
		return specs.Desired{}, err
	}
	return policyDesired(c.Node, c.PolicySpec())
}

func policyDesired(node string, spec substrate.PolicySpec) (specs.Desired, error) {
	na, err := addrs.ParseInstance(node)
	if err != nil {
		return specs.Desired{}, fmt.Errorf("node: %w", err)
	}
	return specs.Desired{Policy: &specs.PolicySpec{Node: na, Spec: spec}}, nil
}

// Kind returns the kind of resource type typ (false for an unknown type).
func (r *Registry) Kind(typ string) (specs.Kind, bool) {
	h, ok := r.byType[typ]
	if !ok {
		return "", false
	}
	return h.Kind(), true
}

// DriverSpec returns the driver-neutral spec of attrs, stored attributes of resource type typ.
func (r *Registry) DriverSpec(typ string, attrs json.RawMessage, refs specs.Refs) (specs.Desired, error) {
	h, ok := r.byType[typ]
	if !ok {
		return specs.Desired{}, fmt.Errorf("no handler for resource type %q (known: %v)", typ, r.Types(addrs.Managed))
	}
	return h.DriverSpec(attrs, refs)
}
