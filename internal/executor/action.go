package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Action is one step of a plan as the executor consumes it. Desired specs (Artifact, Network,
// Node, Policy; exactly the one matching specs.Kind) are set for every op but delete; they hold
// secret references, never plaintext, and they are stored in checkpoints so that recovery can
// finish the operation.
type Action struct {
	Addr   addrs.Instance   `json:"address"`
	Op     plans.Action     `json:"action"`
	Reason string           `json:"reason,omitempty"`
	Kind   specs.Kind       `json:"kind"`
	Driver string           `json:"driver,omitempty"`
	Deps   []addrs.Instance `json:"depends_on,omitempty"`
	// SchemaVersion and Attributes are the handler's, stored into state as they are. When
	// Attributes is nil the executor stores a small public summary of what it applied.
	SchemaVersion int             `json:"schema_version,omitempty"`
	Attributes    json.RawMessage `json:"attributes,omitempty"`

	Artifact *substrate.ArtifactSpec `json:"artifact,omitempty"`
	Network  *substrate.NetworkSpec  `json:"network,omitempty"`
	Node     *specs.NodeSpec         `json:"node,omitempty"`
	Policy   *specs.PolicySpec       `json:"policy,omitempty"`

	impacted []Action // reset: policies living in the node (see Reset)
}

// Request is what Apply (and Destroy) executes: the actions and how to check them.
type Request struct {
	// Fingerprint identifies the plan (the stored plan's fingerprint); it is written into the
	// checkpoint so recovery can say which plan an interrupted run belonged to.
	Fingerprint string
	Actions     []Action
	// Verify, when set, is called with the state read under the lock before any provider call;
	// an error (a stale plan) stops the apply with nothing mutated. Stored plans pass
	// plans.Verify here.
	Verify func(ctx context.Context, st *states.State) error
	// Prepare, when set, is called after Verify with the same state and returns the actions
	// to run, replacing Actions: a plan made (or re-checked) under the lock.
	Prepare func(ctx context.Context, st *states.State) ([]Action, error)
	// Outputs, when set, computes the topology's outputs from the final state.
	Outputs func(st *states.State) (map[string]states.Output, error)
	// Drivers names the drivers the configuration uses (its resources' drivers) or declares
	// (its substrate block). Destroy's residue audit consults these and the drivers named in
	// state and in the actions, and no other (see Executor.Audit).
	Drivers []string
}

func (a *Action) validate() error {
	if a.Op == plans.Unknown {
		return fmt.Errorf("%s: action is unknown (%s); an unknown action cannot be applied: refresh and plan again", a.Addr, a.Reason)
	}
	if a.Op == plans.Delete || a.Op == plans.NoOp {
		return nil
	}
	set := 0
	for _, ok := range []bool{a.Artifact != nil, a.Network != nil, a.Node != nil, a.Policy != nil} {
		if ok {
			set++
		}
	}
	want := map[specs.Kind]bool{specs.KindArtifact: a.Artifact != nil, specs.KindNetwork: a.Network != nil, specs.KindNode: a.Node != nil, specs.KindPolicy: a.Policy != nil}
	ok, known := want[a.Kind]
	if !known {
		return fmt.Errorf("%s: unknown resource kind %q", a.Addr, a.Kind)
	}
	if !ok || set != 1 {
		return fmt.Errorf("%s: %s action needs exactly the %s spec", a.Addr, a.Op, a.Kind)
	}
	if a.Kind != specs.KindArtifact && a.Driver == "" {
		return fmt.Errorf("%s: no driver selected", a.Addr)
	}
	return nil
}
