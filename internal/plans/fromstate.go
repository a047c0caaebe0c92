package plans

import (
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// stateView is a PriorState over a decoded states.State: public attributes only (the private
// envelope never reaches the planner).
type stateView struct {
	st *states.State
}

var _ PriorState = stateView{}

// FromState adapts durable state for planning. A nil state is an empty one (never applied).
func FromState(st *states.State) PriorState {
	if st == nil {
		return &MemoryState{}
	}
	return stateView{st: st}
}

func (v stateView) Lineage() string { return v.st.Lineage }
func (v stateView) Serial() uint64  { return v.st.Serial }

func (v stateView) Resources() []PriorResource {
	out := make([]PriorResource, 0, len(v.st.Resources))
	for _, r := range v.st.Resources {
		status := r.Observation.Status
		if status == "" {
			status = substrate.Present
		}
		out = append(out, PriorResource{Addr: r.Addr, SchemaVersion: r.SchemaVersion, Attributes: r.Attributes,
			Dependencies: r.Dependencies, Status: status, StatusReason: r.Observation.Reason})
	}
	return out
}
