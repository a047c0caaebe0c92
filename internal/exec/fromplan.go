package exec

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// FromPlan turns the planner's action list into executor actions: each handler's stored form
// (the action's After, or Before for a delete) is decoded into the neutral driver specs. The
// stored form is what state keeps as the resource's attributes. st (may be nil) supplies the
// attributes of dependencies the plan leaves unchanged (a node's artifact identity).
func FromPlan(p *plans.Plan, st *states.State) ([]Action, error) {
	stored := map[string]json.RawMessage{}
	if st != nil {
		for _, r := range st.Resources {
			stored[r.Addr.String()] = r.Attributes
		}
	}
	for _, ra := range p.Actions {
		if ra.After != nil {
			stored[ra.Address.String()] = ra.After
		}
	}
	var out []Action
	var errs []error
	for _, ra := range p.Actions {
		a, err := fromResourceAction(ra, stored)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ra.Address, err))
			continue
		}
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}

func fromResourceAction(ra plans.ResourceAction, stored map[string]json.RawMessage) (Action, error) {
	kind, ok := KindOfType[ra.Type]
	if !ok {
		return Action{}, fmt.Errorf("no executor kind for resource type %q", ra.Type)
	}
	a := Action{Addr: ra.Address, Op: Op(ra.Action), Reason: ra.Reason, Kind: kind, Driver: ra.Driver,
		Deps: ra.DependsOn, SchemaVersion: ra.SchemaVersion, Attributes: ra.After}
	attrs := ra.After
	if ra.Action == plans.Delete || ra.Action == plans.Unknown {
		attrs = ra.Before
		a.Attributes = nil
	}
	if attrs == nil {
		return a, nil
	}
	switch kind {
	case KindArtifact:
		var c handlers.ArtifactConfig
		if err := json.Unmarshal(attrs, &c); err != nil {
			return a, err
		}
		// Pin the digest the plan saw: content changed since planning fails the apply (S5).
		a.Artifact = &substrate.ArtifactSpec{Kind: c.Kind, Source: c.Source, BaseDir: c.BaseDir,
			Architecture: c.Architecture, GuestFamily: c.GuestFamily, Digest: c.Digest}
	case KindNetwork:
		var c handlers.NetworkConfig
		if err := json.Unmarshal(attrs, &c); err != nil {
			return a, err
		}
		a.Network = &substrate.NetworkSpec{IPv4CIDR: c.IPv4CIDR, MTU: c.MTU}
	case KindNode:
		var c handlers.NodeConfig
		if err := json.Unmarshal(attrs, &c); err != nil {
			return a, err
		}
		n := &NodeSpec{Spec: substrate.NodeSpec{Driver: c.Driver, CPUs: c.CPUs, MemoryMB: c.MemoryMB,
			Command: c.Command, Hostname: c.Hostname}, Environment: c.Environment}
		var err error
		if n.Spec.Artifact, n.ArtifactFrom, err = artifactOf(c.Artifact, stored); err != nil {
			return a, err
		}
		if n.Spec.Kernel, n.KernelFrom, err = artifactOf(c.Kernel, stored); err != nil {
			return a, err
		}
		names := make([]string, 0, len(c.Attachments))
		for name := range c.Attachments {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			at := c.Attachments[name]
			na, err := addrs.ParseInstance(at.Network)
			if err != nil {
				return a, fmt.Errorf("attachment %q: network: %w", name, err)
			}
			n.Attachments = append(n.Attachments, Attachment{Name: name, Network: na, IPv4: at.IPv4, MAC: at.MAC,
				Gateway: at.Gateway, Aliases: at.Aliases})
		}
		for _, r := range c.Routes {
			n.Routes = append(n.Routes, substrate.Route{To: r.To, Via: r.Via})
		}
		for _, p := range c.Provisioner {
			n.Provisioners = append(n.Provisioners, p.Command)
		}
		a.Node = n
	case KindPolicy:
		var node string
		var spec substrate.PolicySpec
		if ra.Type == "sysbox_router" {
			var c handlers.RouterConfig
			if err := json.Unmarshal(attrs, &c); err != nil {
				return a, err
			}
			node, spec = c.Node, c.PolicySpec()
		} else {
			var c handlers.FirewallConfig
			if err := json.Unmarshal(attrs, &c); err != nil {
				return a, err
			}
			node, spec = c.Node, c.PolicySpec()
		}
		na, err := addrs.ParseInstance(node)
		if err != nil {
			return a, fmt.Errorf("node: %w", err)
		}
		a.Policy = &PolicySpec{Node: na, Spec: spec}
	}
	if a.Op == OpDelete || a.Op == OpUnknown {
		// Deletes carry only what removal needs (a policy's node); no desired spec.
		if a.Policy != nil {
			a.Policy = &PolicySpec{Node: a.Policy.Node}
		}
		a.Artifact, a.Network, a.Node = nil, nil, nil
	}
	return a, nil
}

// artifactOf resolves an artifact reference to the identity stored for it.
func artifactOf(ref string, stored map[string]json.RawMessage) (*substrate.ArtifactIdentity, *addrs.Instance, error) {
	if ref == "" {
		return nil, nil, nil
	}
	addr, err := addrs.ParseInstance(ref)
	if err != nil {
		return nil, nil, fmt.Errorf("artifact %q: %w", ref, err)
	}
	raw, ok := stored[ref]
	if !ok {
		return nil, nil, fmt.Errorf("artifact %s: neither planned nor in state", ref)
	}
	var c handlers.ArtifactConfig
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil, nil, fmt.Errorf("artifact %s: %w", ref, err)
	}
	return &substrate.ArtifactIdentity{Kind: c.Kind, Source: c.Source, Architecture: c.Architecture,
		GuestFamily: c.GuestFamily, Size: c.Size, Digest: c.Digest}, &addr, nil
}
