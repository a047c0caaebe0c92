package executor

import (
	"encoding/json"
	"errors"
	"fmt"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Resources is what the executor asks about resource types: each type's kind and the
// driver-neutral spec of its stored attributes. The handler registry implements it; the
// executor never decodes a handler's attributes itself nor routes on a type's name.
type Resources interface {
	Kind(resourceType string) (specs.Kind, bool)
	DriverSpec(resourceType string, attrs json.RawMessage, refs specs.Refs) (specs.Desired, error)
}

// FromPlan turns the planner's action list into executor actions: each handler's stored form
// (the action's After, or Before for a delete) is turned into the neutral driver specs by its
// handler in res. The stored form is what state keeps as the resource's attributes. st (may
// be nil) supplies the attributes of dependencies the plan leaves unchanged (a node's
// artifact identity).
func FromPlan(p *plans.Plan, st *states.State, res Resources) ([]Action, error) {
	if res == nil {
		return nil, errors.New("executor actions from a plan: no resource registry")
	}
	refs := storedRefs{res: res, attrs: map[string]json.RawMessage{}}
	if st != nil {
		for _, r := range st.Resources {
			refs.attrs[r.Addr.String()] = r.Attributes
		}
	}
	for _, ra := range p.Actions {
		if ra.After != nil {
			refs.attrs[ra.Address.String()] = ra.After
		}
	}
	var out []Action
	var errs []error
	for _, ra := range p.Actions {
		a, err := fromResourceAction(ra, res, refs)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ra.Address, err))
			continue
		}
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}

func fromResourceAction(ra plans.ResourceAction, res Resources, refs specs.Refs) (Action, error) {
	kind, ok := res.Kind(ra.Type)
	if !ok {
		return Action{}, fmt.Errorf("no executor kind for resource type %q", ra.Type)
	}
	a := Action{Addr: ra.Address, Op: ra.Action, Reason: ra.Reason, Kind: kind, Driver: ra.Driver,
		Deps: ra.DependsOn, SchemaVersion: ra.SchemaVersion, Attributes: ra.After}
	attrs := ra.After
	if ra.Action == plans.Delete || ra.Action == plans.Unknown {
		attrs = ra.Before
		a.Attributes = nil
	}
	if attrs == nil {
		return a, nil
	}
	d, err := res.DriverSpec(ra.Type, attrs, refs)
	if err != nil {
		return a, err
	}
	a.Artifact, a.Network, a.Node, a.Policy = d.Artifact, d.Network, d.Node, d.Policy
	if a.Op == plans.Delete || a.Op == plans.Unknown {
		// Deletes carry only what removal needs (a policy's node); no desired spec.
		if a.Policy != nil {
			a.Policy = &specs.PolicySpec{Node: a.Policy.Node}
		}
		a.Artifact, a.Network, a.Node = nil, nil, nil
	}
	return a, nil
}

// storedRefs resolves references against the attributes a plan or state holds.
type storedRefs struct {
	res   Resources
	attrs map[string]json.RawMessage
}

// Artifact implements specs.Refs.
func (r storedRefs) Artifact(ref addrs.Instance) (*substrate.ArtifactIdentity, error) {
	raw, ok := r.attrs[ref.String()]
	if !ok {
		return nil, fmt.Errorf("artifact %s: neither planned nor in state", ref)
	}
	d, err := r.res.DriverSpec(ref.Resource.Type, raw, r)
	if err != nil {
		return nil, fmt.Errorf("artifact %s: %w", ref, err)
	}
	if d.Identity == nil {
		return nil, fmt.Errorf("artifact %s: not an artifact", ref)
	}
	return d.Identity, nil
}
