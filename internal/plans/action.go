package plans

import (
	"encoding/json"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Action is what apply will do to one resource instance.
type Action string

// The actions of S10. Update exists only for handlers that implement a real in-place update.
const (
	Create  Action = "create"
	Read    Action = "read"
	NoOp    Action = "no-op"
	Update  Action = "update"
	Replace Action = "replace" // delete the prior object, then create the desired one
	Delete  Action = "delete"
	Unknown Action = "unknown" // observation unknown: cannot be applied
	// Reset replaces a node's generation from its baseline (S15); only the executor's Reset
	// produces it, never the planner.
	Reset Action = "reset"
)

// Effect is what one attribute change does to its resource, as the handler's schema says.
type Effect string

const (
	ForcesReplacement Effect = "forces-replacement"
	InPlace           Effect = "in-place"
	NoEffect          Effect = "no-op" // recorded, but nothing happens (e.g. provisioners after create)
)

// AttrChange is one schema-owned difference between prior and desired attributes.
type AttrChange struct {
	Path   string          `json:"path"`
	Before json.RawMessage `json:"before,omitempty"`
	After  json.RawMessage `json:"after,omitempty"`
	Effect Effect          `json:"effect"`
	Why    string          `json:"why,omitempty"`
}

// Diff is a handler's judgement of prior vs desired.
type Diff struct {
	Action  Action // NoOp, Update or Replace
	Reason  string
	Changes []AttrChange
}

// Facts are plan-time observations handed to the pure planner: artifact identities computed
// from their sources (S5) by the caller.
type Facts struct {
	Artifacts map[string]substrate.ArtifactIdentity // by canonical address
}

// Requirement is the driver and capabilities an action needs (S6).
type Requirement struct {
	Driver       string
	Capabilities []driver.Capability
}

// Handler is what the planner needs from a resource type's handler (S2).
type Handler interface {
	SchemaVersion() int
	// Desired returns the stored attributes of ri as a JSON object, completed with plan-time
	// facts (artifact digests, default MACs); an error names the address and the problem.
	Desired(ri *config.ResourceInstance, facts Facts) (json.RawMessage, error)
	// Diff compares prior stored attributes with desired ones.
	Diff(prior, desired json.RawMessage) (Diff, error)
	// DependencyChanged decides what a change of dependency dep (planned as depAction) means
	// for ri: NoOp (no effect) or Replace, with a reason. No automatic cascade (S10).
	DependencyChanged(ri *config.ResourceInstance, dep addrs.Instance, depAction Action) (Action, string)
	// Requirements lists the driver capabilities action needs, from the stored attributes
	// (desired for create/update/replace, prior for delete).
	Requirements(attrs json.RawMessage, action Action) (Requirement, error)
}

// PriorKeeper is implemented by handlers whose stored form holds values fixed when the object
// was created (a derived default MAC): given the prior stored form of the same address, it
// returns desired with those values kept, so that an object moved by `state mv` (whose default
// would now derive from another address) keeps its identity.
type PriorKeeper interface {
	KeepFromPrior(ri *config.ResourceInstance, prior, desired json.RawMessage) (json.RawMessage, error)
}

// Handlers finds the handler of a resource type.
type Handlers interface {
	Handler(mode addrs.ResourceMode, typ string) (Handler, bool)
}
