package exec

import (
	"context"
	"encoding/json"
	"fmt"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Op is a plan action kind (S10).
type Op string

const (
	OpCreate  Op = "create"
	OpRead    Op = "read"
	OpNoop    Op = "no-op"
	OpUpdate  Op = "update"
	OpReplace Op = "replace"
	OpDelete  Op = "delete"
	OpUnknown Op = "unknown"
	// OpReset replaces a node's generation from its baseline (S15); produced by Reset, never by
	// the planner.
	OpReset Op = "reset"
)

// Kind says which driver capabilities a resource is operated through. Handlers (through the
// planner) set it; the executor never derives behaviour from a resource type's name.
type Kind string

const (
	KindArtifact Kind = "artifact" // Artifacts: resolve and verify, no external object
	KindNetwork  Kind = "network"  // Networks
	KindNode     Kind = "node"     // Nodes, NICs, (Resetter, GuestExec)
	KindPolicy   Kind = "policy"   // Policy, installed inside a node
)

// Action is one step of a plan as the executor consumes it. Desired specs (Artifact, Network,
// Node, Policy; exactly the one matching Kind) are set for every op but delete; they hold
// secret references, never plaintext, and they are stored in checkpoints so that recovery can
// finish the operation.
type Action struct {
	Addr   addrs.Instance   `json:"address"`
	Op     Op               `json:"action"`
	Reason string           `json:"reason,omitempty"`
	Kind   Kind             `json:"kind"`
	Driver string           `json:"driver,omitempty"`
	Deps   []addrs.Instance `json:"depends_on,omitempty"`
	// SchemaVersion and Attributes are the handler's, stored into state as they are. When
	// Attributes is nil the executor stores a small public summary of what it applied.
	SchemaVersion int             `json:"schema_version,omitempty"`
	Attributes    json.RawMessage `json:"attributes,omitempty"`

	Artifact *substrate.ArtifactSpec `json:"artifact,omitempty"`
	Network  *substrate.NetworkSpec  `json:"network,omitempty"`
	Node     *NodeSpec               `json:"node,omitempty"`
	Policy   *PolicySpec             `json:"policy,omitempty"`

	impacted []Action // reset: policies living in the node (see Reset)
}

// NodeSpec is a node's desired form. Spec.Owner is filled in by the executor. Spec.Artifact and
// Spec.Kernel carry the identities the planner resolved (and fingerprinted).
type NodeSpec struct {
	Spec substrate.NodeSpec `json:"spec"`
	// Environment values may embed secret references (secret://env/NAME); they are resolved
	// right before the provider call and the plaintext goes only into Spec.Environment of that
	// call.
	Environment map[string]string `json:"environment,omitempty"`
	Attachments []Attachment      `json:"attachments,omitempty"`
	Routes      []substrate.Route `json:"routes,omitempty"`
	// Provisioners run in order through guest execution once the node is up (after creation,
	// replacement or reset); arguments may embed secret references. A crash while they run
	// makes recovery run them again (at least once).
	Provisioners [][]string `json:"provisioners,omitempty"`
	// ArtifactFrom and KernelFrom name the artifact resources whose driver reference
	// (their state ExternalID, e.g. an image id) completes Spec.Artifact/Kernel at apply time.
	ArtifactFrom *addrs.Instance `json:"artifact_from,omitempty"`
	KernelFrom   *addrs.Instance `json:"kernel_from,omitempty"`
}

// Attachment is one desired attachment; its network handle is looked up in state at apply time.
type Attachment struct {
	Name    string         `json:"name"`
	Network addrs.Instance `json:"network"`
	IPv4    []string       `json:"ipv4,omitempty"`
	MAC     string         `json:"mac"`
	Gateway string         `json:"gateway,omitempty"`
	Aliases []string       `json:"aliases,omitempty"`
	MTU     int            `json:"mtu,omitempty"`
}

// PolicySpec is a policy's desired form; Spec.Owner is filled in by the executor.
type PolicySpec struct {
	Node addrs.Instance       `json:"node"`
	Spec substrate.PolicySpec `json:"spec"`
}

// Plan is what Apply executes.
type Plan struct {
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

// KindOfType maps the built-in resource types to their kind, for resources found only in state
// (destroy, refresh, orphans). Handlers registering other types add to a copy.
var KindOfType = map[string]Kind{
	"sysbox_artifact": KindArtifact,
	"sysbox_network":  KindNetwork,
	"sysbox_node":     KindNode,
	"sysbox_firewall": KindPolicy,
	"sysbox_router":   KindPolicy,
}

func (a *Action) validate() error {
	if a.Op == OpUnknown {
		return fmt.Errorf("%s: action is unknown (%s); an unknown action cannot be applied: refresh and plan again", a.Addr, a.Reason)
	}
	if a.Op == OpDelete || a.Op == OpNoop {
		return nil
	}
	set := 0
	for _, ok := range []bool{a.Artifact != nil, a.Network != nil, a.Node != nil, a.Policy != nil} {
		if ok {
			set++
		}
	}
	want := map[Kind]bool{KindArtifact: a.Artifact != nil, KindNetwork: a.Network != nil, KindNode: a.Node != nil, KindPolicy: a.Policy != nil}
	ok, known := want[a.Kind]
	if !known {
		return fmt.Errorf("%s: unknown resource kind %q", a.Addr, a.Kind)
	}
	if !ok || set != 1 {
		return fmt.Errorf("%s: %s action needs exactly the %s spec", a.Addr, a.Op, a.Kind)
	}
	if a.Kind != KindArtifact && a.Driver == "" {
		return fmt.Errorf("%s: no driver selected", a.Addr)
	}
	return nil
}
