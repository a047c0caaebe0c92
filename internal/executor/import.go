package executor

import (
	"context"
	"fmt"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/specs"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// importObject adopts externalID as desired's network, policy or artifact (S22) and returns
// the state entry to record: the handler's planned attributes (its import normalisation: the
// configuration as the plan decoded it), the driver's handle and what observing it says now.
// Nodes go through Import's own path (attachments, drift of missing ones).
func (e *Executor) importObject(ctx context.Context, st *states.State, desired Action, externalID string, owner substrate.Owner) (*states.Resource, error) {
	addr := desired.Addr
	var (
		h   substrate.Handle
		obs substrate.Observation
		id  *substrate.ArtifactIdentity
		err error
	)
	switch desired.Kind {
	case specs.KindNetwork:
		h, obs, err = e.importNetwork(ctx, desired, externalID, owner)
	case specs.KindPolicy:
		h, obs, err = e.importPolicy(ctx, st, desired, externalID, owner)
	case specs.KindArtifact:
		h, id, err = e.importArtifact(ctx, desired, externalID, owner)
		obs = substrate.Observation{Status: substrate.Present}
	default:
		return nil, fmt.Errorf("import %s: resources of kind %q cannot be imported", addr, desired.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("import %s from %s: %w", addr, externalID, err)
	}
	now := e.now()
	reason := "imported"
	if obs.Status != substrate.Present && obs.Reason != "" {
		reason = "imported; " + obs.Reason
	}
	res := &states.Resource{Addr: addr, SchemaVersion: max(desired.SchemaVersion, 1), Driver: desired.Driver,
		ExternalID: h.ExternalID, Owner: owner, Dependencies: desired.Deps, CreatedAt: now, UpdatedAt: now,
		Observation: states.Observation{Status: obs.Status, Reason: reason, At: now}}
	if p := h.Private; p.Driver != "" || p.Data != nil {
		res.Private = &p
	}
	res.Attributes = desired.Attributes
	if res.Attributes == nil {
		s := summary{Kind: desired.Kind, Generation: 1, Artifact: id}
		if desired.Policy != nil {
			s.Node, s.Digest = desired.Policy.Node.String(), desired.Policy.Spec.Digest()
		}
		if desired.Network != nil {
			s.IPv4CIDR = desired.Network.IPv4CIDR
		}
		res.Attributes, _ = jsonMarshal(s)
	}
	return res, nil
}

func (e *Executor) importNetwork(ctx context.Context, desired Action, externalID string, owner substrate.Owner) (substrate.Handle, substrate.Observation, error) {
	if desired.Network == nil {
		return substrate.Handle{}, substrate.Observation{}, fmt.Errorf("no network spec planned")
	}
	imp, err := driver.Get[driver.NetworkImporter](e.Registry, desired.Driver, driver.CapImport)
	if err != nil {
		return substrate.Handle{}, substrate.Observation{}, err
	}
	nets, err := driver.Get[driver.Networks](e.Registry, desired.Driver, driver.CapManagedNetwork)
	if err != nil {
		return substrate.Handle{}, substrate.Observation{}, err
	}
	spec := *desired.Network
	spec.Owner = owner
	h, err := imp.ImportNetwork(ctx, externalID, spec)
	if err != nil {
		return substrate.Handle{}, substrate.Observation{}, err
	}
	obs, err := nets.ObserveNetwork(ctx, h, owner)
	if err != nil || obs.Status == substrate.Unknown {
		return substrate.Handle{}, substrate.Observation{}, unknownErr("network "+h.ExternalID, obs, err)
	}
	return h, obs, nil
}

// importPolicy needs the policy's node in state: the table lives inside it.
func (e *Executor) importPolicy(ctx context.Context, st *states.State, desired Action, externalID string, owner substrate.Owner) (substrate.Handle, substrate.Observation, error) {
	if desired.Policy == nil {
		return substrate.Handle{}, substrate.Observation{}, fmt.Errorf("no policy spec planned")
	}
	node := st.Resource(desired.Policy.Node)
	if node == nil {
		return substrate.Handle{}, substrate.Observation{}, fmt.Errorf("its node %s is not in state; create or import the node first", desired.Policy.Node)
	}
	imp, err := driver.Get[driver.PolicyImporter](e.Registry, desired.Driver, driver.CapImport)
	if err != nil {
		return substrate.Handle{}, substrate.Observation{}, err
	}
	pol, err := driver.Get[driver.Policy](e.Registry, desired.Driver, driver.CapPolicy)
	if err != nil {
		return substrate.Handle{}, substrate.Observation{}, err
	}
	spec := desired.Policy.Spec
	spec.Owner = owner
	nh := handleOf(node)
	h, err := imp.ImportPolicy(ctx, nh, externalID, node.Attachments, spec)
	if err != nil {
		return substrate.Handle{}, substrate.Observation{}, err
	}
	obs, err := pol.ObservePolicy(ctx, nh, h, node.Attachments, spec)
	if err != nil || obs.Status == substrate.Unknown {
		return substrate.Handle{}, substrate.Observation{}, unknownErr("policy "+h.ExternalID, obs, err)
	}
	return h, obs, nil
}

// importArtifact: an artifact is content-addressed and has no external object to claim, so
// importing it resolves the declared source and requires EXTERNAL_ID to be what it resolves
// to (its digest, or the driver's reference such as an image id).
func (e *Executor) importArtifact(ctx context.Context, desired Action, externalID string, owner substrate.Owner) (substrate.Handle, *substrate.ArtifactIdentity, error) {
	if desired.Artifact == nil {
		return substrate.Handle{}, nil, fmt.Errorf("no artifact spec planned")
	}
	arts, err := driver.Get[driver.Artifacts](e.Registry, desired.Driver, driver.CapArtifact)
	if err != nil {
		return substrate.Handle{}, nil, err
	}
	spec := *desired.Artifact
	spec.Owner = owner
	id, err := arts.ResolveArtifact(ctx, spec)
	if err != nil {
		return substrate.Handle{}, nil, fmt.Errorf("resolve artifact %s: %w", spec.Source, err)
	}
	if externalID != id.Digest && (id.Ref == "" || externalID != id.Ref) {
		return substrate.Handle{}, nil, fmt.Errorf("%s resolves to digest %s (reference %q), not %s: %w", spec.Source, id.Digest, id.Ref, externalID, driver.ErrDigestMismatch)
	}
	return substrate.Handle{Driver: desired.Driver, ExternalID: id.Ref}, &id, nil
}
