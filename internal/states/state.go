package states

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// State is a topology's durable state.
type State struct {
	// Lineage identifies this state for its whole life (a UUID fixed at creation). A save with
	// another lineage is refused by every backend.
	Lineage string
	// Serial grows by one with each saved change; backends compare it for compare-and-swap.
	Serial uint64
	// ToolVersion is the version of the sysbox that wrote the state last.
	ToolVersion string
	// Resources, kept sorted by address (see Sort); at most one per address.
	Resources []*Resource
	// Outputs are the topology's non-secret outputs by name.
	Outputs map[string]Output
}

// Output is one non-secret output value (JSON).
type Output struct {
	Value json.RawMessage `json:"value"`
}

// Resource is one resource instance's state.
type Resource struct {
	// Addr is the canonical address.
	Addr addrs.Instance `json:"address"`
	// SchemaVersion is the version of the handler schema that wrote Attributes.
	SchemaVersion int `json:"schema_version"`
	// Driver names the driver that operates the external object ("" for pure data).
	Driver string `json:"driver,omitempty"`
	// ExternalID is the external object's identity as the driver reported it (a container id, a
	// namespace name). Public; reset changes it.
	ExternalID string `json:"external_id,omitempty"`
	// Attributes are the handler's typed public attributes, encoded by the handler.
	Attributes json.RawMessage `json:"attributes,omitempty"`
	// Dependencies are the addresses this instance depended on when it was last applied.
	Dependencies []addrs.Instance `json:"dependencies,omitempty"`
	// Attachments are the node's wired attachments (S8).
	Attachments []substrate.AttachmentState `json:"attachments,omitempty"`
	// Observation is the latest observation.
	Observation Observation `json:"observation"`
	// Owner holds the ownership anchors written onto the external object (S16). After
	// `state mv` it still names the object's markers, which carry the old address.
	Owner substrate.Owner `json:"owner"`
	// Private is the driver's versioned private envelope; opaque to the runtime (S7).
	Private *substrate.Envelope `json:"private,omitempty"`
	// CreatedAt and UpdatedAt are UTC.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Observation is the latest observation status of a resource (S12).
type Observation struct {
	Status substrate.Status `json:"status"`
	Reason string           `json:"reason,omitempty"`
	At     time.Time        `json:"at,omitempty"`
}

// ValidStatus reports whether s is one of the five observation statuses.
func ValidStatus(s substrate.Status) bool {
	switch s {
	case substrate.Present, substrate.Absent, substrate.Drifted, substrate.Degraded, substrate.Unknown:
		return true
	}
	return false
}

// New returns an empty state with a fresh lineage and serial 0 (nothing saved yet).
func New() *State {
	return &State{Lineage: NewLineage(), Outputs: map[string]Output{}}
}

// NewLineage returns a random version-4 UUID.
func NewLineage() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("states: crypto/rand: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

// ToolVersion reports the running binary's module version, or "devel".
func ToolVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

// Sort orders resources by canonical address.
func (s *State) Sort() {
	slices.SortFunc(s.Resources, func(a, b *Resource) int { return a.Addr.Compare(b.Addr) })
}

func (s *State) index(a addrs.Instance) (int, bool) {
	return slices.BinarySearchFunc(s.Resources, a, func(r *Resource, a addrs.Instance) int { return r.Addr.Compare(a) })
}

// Resource returns the resource at a, or nil.
func (s *State) Resource(a addrs.Instance) *Resource {
	if i, ok := s.index(a); ok {
		return s.Resources[i]
	}
	return nil
}

// Addresses returns every resource address in canonical order.
func (s *State) Addresses() []addrs.Instance {
	out := make([]addrs.Instance, len(s.Resources))
	for i, r := range s.Resources {
		out[i] = r.Addr
	}
	return out
}

// Set inserts or replaces the resource at r.Addr, keeping the order.
func (s *State) Set(r *Resource) {
	i, ok := s.index(r.Addr)
	if ok {
		s.Resources[i] = r
		return
	}
	s.Resources = slices.Insert(s.Resources, i, r)
}

// Remove forgets the resource at a and reports whether it was there. It touches nothing
// external.
func (s *State) Remove(a addrs.Instance) bool {
	i, ok := s.index(a)
	if ok {
		s.Resources = slices.Delete(s.Resources, i, i+1)
	}
	return ok
}

// Move carries out `state mv FROM TO` (addrs.PlanMove says what moves where and refuses
// ill-formed moves before anything changes). Each moved resource keeps its object: external ID,
// owner markers, private envelope, attachments (their fixed MACs included): no delete, no
// create (S21). Dependencies of other resources on a moved one are rewritten.
func (s *State) Move(from, to addrs.Target, now time.Time) ([]addrs.MovePair, error) {
	pairs, err := addrs.PlanMove(from, to, s.Addresses())
	if err != nil {
		return nil, err
	}
	renamed := make(map[string]addrs.Instance, len(pairs))
	moved := make([]*Resource, 0, len(pairs))
	for _, p := range pairs {
		r := s.Resource(p.From).Clone()
		r.Addr = p.To
		r.UpdatedAt = now.UTC()
		moved = append(moved, r)
		renamed[p.From.UniqueKey()] = p.To
	}
	// remove every source before adding any destination, so the order of pairs cannot matter
	for _, p := range pairs {
		s.Remove(p.From)
	}
	for _, r := range moved {
		s.Set(r)
	}
	for _, o := range s.Resources {
		copied := false
		for i, d := range o.Dependencies {
			if nd, ok := renamed[d.UniqueKey()]; ok {
				if !copied { // the list may be shared with other resources (or a plan): copy on write
					o.Dependencies, copied = slices.Clone(o.Dependencies), true
				}
				o.Dependencies[i] = nd
			}
		}
	}
	return pairs, nil
}

// Clone returns a deep copy of r. Opaque payloads are copied as bytes.
func (r *Resource) Clone() *Resource {
	c := *r
	c.Addr = r.Addr.WithKey(r.Addr.Key)
	c.Attributes = slices.Clone(r.Attributes)
	c.Dependencies = slices.Clone(r.Dependencies)
	if r.Attachments != nil {
		c.Attachments = make([]substrate.AttachmentState, len(r.Attachments))
		for i, a := range r.Attachments {
			a.IPv4 = slices.Clone(a.IPv4)
			a.Private.Data = slices.Clone(a.Private.Data)
			c.Attachments[i] = a
		}
	}
	if r.Private != nil {
		p := *r.Private
		p.Data = slices.Clone(p.Data)
		c.Private = &p
	}
	return &c
}

// ShallowCopy returns a copy of s that shares its resources: a consistent copy of s for as long
// as s's resources are replaced (Set, Remove) rather than changed in place, as the executor
// changes its working state, at the cost of copying the resource list instead of every
// resource (a deep Clone of a large state per save was a third of the executor's time).
func (s *State) ShallowCopy() *State {
	c := &State{Lineage: s.Lineage, Serial: s.Serial, ToolVersion: s.ToolVersion}
	c.Resources = slices.Clone(s.Resources)
	c.Outputs = make(map[string]Output, len(s.Outputs)) // as Clone: never nil
	for k, v := range s.Outputs {
		c.Outputs[k] = v
	}
	return c
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := &State{Lineage: s.Lineage, Serial: s.Serial, ToolVersion: s.ToolVersion}
	c.Resources = make([]*Resource, len(s.Resources))
	for i, r := range s.Resources {
		c.Resources[i] = r.Clone()
	}
	c.Outputs = make(map[string]Output, len(s.Outputs))
	for k, v := range s.Outputs {
		c.Outputs[k] = Output{Value: slices.Clone(v.Value)}
	}
	return c
}

// NotFoundError says no resource has the address.
type NotFoundError struct{ Addr addrs.Instance }

func (e *NotFoundError) Error() string { return fmt.Sprintf("no resource %s in state", e.Addr) }

// ExistsError says a resource already has the address.
type ExistsError struct{ Addr addrs.Instance }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("resource %s already exists in state", e.Addr)
}
