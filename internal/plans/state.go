package plans

import (
	"encoding/json"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// PriorResource is one resource instance of the prior state as the planner sees it: public
// attributes only, never the provider-private envelope.
type PriorResource struct {
	Addr          addrs.Instance
	SchemaVersion int
	// Attributes is the stored form the instance was applied with (the After of its action).
	Attributes   json.RawMessage
	Dependencies []addrs.Instance
	// Status is the latest observation; "" is treated as present.
	Status substrate.Status
	// StatusReason explains a drifted, degraded or unknown status.
	StatusReason string
}

// PriorState is the state a plan is made against. The state manager implements it on real
// state; MemoryState is for tests and for a topology that has never been applied.
type PriorState interface {
	Lineage() string
	Serial() uint64
	Resources() []PriorResource
}

// MemoryState is an in-memory PriorState.
type MemoryState struct {
	LineageID string
	SerialNo  uint64
	Items     []PriorResource
}

var _ PriorState = (*MemoryState)(nil)

// Lineage implements PriorState.
func (m *MemoryState) Lineage() string { return m.LineageID }

// Serial implements PriorState.
func (m *MemoryState) Serial() uint64 { return m.SerialNo }

// Resources implements PriorState.
func (m *MemoryState) Resources() []PriorResource { return m.Items }
