package ui

import (
	"encoding/json"
	"sort"
	"strings"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Element kinds.
const (
	KindNode     = "node"
	KindNetwork  = "network"
	KindFirewall = "firewall"
	KindRouter   = "router"
	KindOther    = "other"
)

// Differences between desired (configuration) and recorded (state) elements.
const (
	DiffConfigOnly = "config-only" // declared but not in state (not applied yet)
	DiffStateOnly  = "state-only"  // in state but no longer declared (destroy pending)
	DiffDrifted    = "drifted"     // a refresh found the object different from its record
)

// Graph is the topology as the page and /api/graph see it.
type Graph struct {
	// Title names what is shown (the control plane: project and workspace).
	Title   string `json:"title,omitempty"`
	Lineage string `json:"lineage,omitempty"`
	Serial  uint64 `json:"serial"`
	// Version, when the source sets it, identifies the stored data this graph was built from
	// and is its event id (see Server).
	Version  string    `json:"version,omitempty"`
	Error    string    `json:"error,omitempty"` // why configuration or state could not be read
	Elements []Element `json:"elements"`
	Edges    []Edge    `json:"edges"`
	// Run is the latest run and its progress lines, when the source knows runs.
	Run *Run `json:"run,omitempty"`
}

// Run is an operation on the topology and its progress so far.
type Run struct {
	ID     string `json:"id"`
	Op     string `json:"op"`
	Status string `json:"status"`
	Result string `json:"result,omitempty"`
	// Lines are the run's last progress lines, oldest first; Seq is the first one's sequence
	// number in the run's log (earlier ones were left out).
	Seq   int64    `json:"seq"`
	Lines []string `json:"lines"`
	// Checkpoints are the run's last durable checkpoint records, oldest first: what step of
	// which resource's operation is done, and when.
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
}

// Checkpoint records kinds.
const (
	CheckpointRun = "run" // the run began
	CheckpointOp  = "op"  // an operation reached a step
	CheckpointEnd = "end" // the run ended
)

// Checkpoint is one durable checkpoint record of a run (the executor's log, summarised): its
// number in the log, when it became durable, and what it says. It is also the data of a
// control plane run's "checkpoint" event. It carries nothing else of the operation: no
// desired spec, handle, owner anchors or error text.
type Checkpoint struct {
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Record  string    `json:"record"`
	Run     string    `json:"run,omitempty"` // the executor's run id (record "run")
	Address string    `json:"address,omitempty"`
	Action  string    `json:"action,omitempty"`
	Step    string    `json:"step,omitempty"`
}

// EventCheckpoint is the kind of a control plane run's event whose data is a Checkpoint (JSON).
const EventCheckpoint = "checkpoint"

// MaxCheckpoints bounds the checkpoint records a graph carries (the latest ones).
const MaxCheckpoints = 200

// LastCheckpoints returns the last MaxCheckpoints of cs.
func LastCheckpoints(cs []Checkpoint) []Checkpoint {
	return cs[max(len(cs)-MaxCheckpoints, 0):]
}

// Element is one resource instance.
type Element struct {
	Address     string     `json:"address"`
	Kind        string     `json:"kind"`
	Type        string     `json:"type"`
	Module      string     `json:"module,omitempty"`
	Driver      string     `json:"driver,omitempty"`
	Observation string     `json:"observation"`
	Reason      string     `json:"reason,omitempty"`
	ObservedAt  *time.Time `json:"observed_at,omitempty"`
	ExternalID  string     `json:"external_id,omitempty"`
	Generation  uint64     `json:"generation,omitempty"`
	InConfig    bool       `json:"in_config"`
	InState     bool       `json:"in_state"`
	Diff        string     `json:"diff,omitempty"`
	// Node is the node a firewall or router is installed on.
	Node string `json:"node,omitempty"`
	// Attributes are the state's public attributes (handlers keep secrets out of state).
	Attributes json.RawMessage `json:"attributes,omitempty"`
	// Private envelopes are reduced to what they are, as in `state show`: never their data.
	Private *Opaque `json:"private,omitempty"`
}

// Opaque describes a private envelope without its content.
type Opaque = substrate.EnvelopeSummary

// Edge kinds.
const (
	EdgeAttachment = "attachment"
	EdgeDependency = "dependency"
)

// Edge connects two elements by address.
type Edge struct {
	ID     string   `json:"id"`
	Kind   string   `json:"kind"`
	Source string   `json:"source"`
	Target string   `json:"target"`
	Label  string   `json:"label,omitempty"`
	Name   string   `json:"name,omitempty"` // attachment name
	IPv4   []string `json:"ipv4,omitempty"`
}

func kindOf(typ string) string {
	switch typ {
	case "sysbox_node":
		return KindNode
	case "sysbox_network":
		return KindNetwork
	case "sysbox_firewall":
		return KindFirewall
	case "sysbox_router":
		return KindRouter
	}
	return KindOther
}

// Build joins the evaluated configuration (top, may be nil) and the state (st, may be nil)
// into a graph. Pure: no I/O. Recorded attachments win over configured ones, since they say
// what is wired.
func Build(top *config.Topology, st *states.State) *Graph {
	b := &builder{
		g:      &Graph{Elements: []Element{}, Edges: []Edge{}},
		byAddr: map[string]*Element{}, cfgAttach: map[string][]attach{},
		stAttach: map[string][]attach{}, deps: map[string][]string{},
	}
	if top != nil {
		b.addConfig(top)
	}
	if st != nil {
		b.addState(st)
	}
	sort.Strings(b.order)
	b.addElements()
	b.addEdges()
	return b.g
}

// builder is the state Build accumulates: elements by address (in first-seen order until
// sorted) and, per address, the configured and recorded attachments and dependencies.
type builder struct {
	g         *Graph
	byAddr    map[string]*Element
	order     []string
	cfgAttach map[string][]attach
	stAttach  map[string][]attach
	deps      map[string][]string
}

// element returns the element of a, creating it on first sight.
func (b *builder) element(a addrs.Instance) *Element {
	k := a.String()
	if e, ok := b.byAddr[k]; ok {
		return e
	}
	e := &Element{Address: k, Kind: kindOf(a.Resource.Type), Type: a.Resource.Type, Module: a.Module.String()}
	b.byAddr[k] = e
	b.order = append(b.order, k)
	return e
}

// addConfig marks the configured resources with their driver, node, attachments and
// dependencies.
func (b *builder) addConfig(top *config.Topology) {
	for _, r := range top.Resources {
		e := b.element(r.Addr)
		e.InConfig = true
		switch c := r.Config.(type) {
		case handlers.NodeConfig:
			e.Driver = c.Driver
			for name, at := range c.Attachments {
				b.cfgAttach[e.Address] = append(b.cfgAttach[e.Address], attach{name, at.Network, at.IPv4})
			}
		case handlers.NetworkConfig:
			e.Driver = c.Driver
		case handlers.FirewallConfig:
			e.Driver, e.Node = c.Driver, c.Node
		case handlers.RouterConfig:
			e.Driver, e.Node = c.Driver, c.Node
		}
		for _, d := range r.DependsOn {
			b.deps[e.Address] = append(b.deps[e.Address], d.String())
		}
	}
}

// addState marks the recorded resources with what the state knows of them; dependencies
// come from the state only for resources the configuration no longer has.
func (b *builder) addState(st *states.State) {
	b.g.Lineage, b.g.Serial = st.Lineage, st.Serial
	for _, r := range st.Resources {
		e := b.element(r.Addr)
		e.InState = true
		if r.Driver != "" {
			e.Driver = r.Driver
		}
		e.ExternalID = r.ExternalID
		e.Generation = r.Owner.Generation
		e.Observation = string(r.Observation.Status)
		e.Reason = r.Observation.Reason
		if !r.Observation.At.IsZero() {
			at := r.Observation.At.UTC()
			e.ObservedAt = &at
		}
		if len(r.Attributes) > 0 {
			e.Attributes = append(json.RawMessage(nil), r.Attributes...)
		}
		if r.Private != nil {
			sum := r.Private.Summary()
			e.Private = &sum
		}
		if e.Node == "" {
			e.Node = nodeOf(r.Attributes)
		}
		if !e.InConfig {
			for _, d := range r.Dependencies {
				b.deps[e.Address] = append(b.deps[e.Address], d.String())
			}
		}
		for _, a := range r.Attachments {
			b.stAttach[e.Address] = append(b.stAttach[e.Address], attach{a.Name, networkOf(b.cfgAttach[e.Address], a.Name), a.IPv4})
		}
	}
}

// addElements appends the elements in address order, each with its diff and observation.
func (b *builder) addElements() {
	for _, k := range b.order {
		e := b.byAddr[k]
		switch {
		case !e.InState:
			e.Observation, e.Diff = string(substrate.Absent), DiffConfigOnly
		case !e.InConfig:
			e.Diff = DiffStateOnly
		case e.Observation == string(substrate.Drifted):
			e.Diff = DiffDrifted
		}
		if e.Observation == "" {
			e.Observation = string(substrate.Unknown)
		}
		b.g.Elements = append(b.g.Elements, *e)
	}
}

// addEdges appends, per element in address order, its attachment edges and then its
// dependency edges.
func (b *builder) addEdges() {
	for _, k := range b.order {
		ats := b.stAttach[k]
		if len(ats) == 0 {
			ats = b.cfgAttach[k]
		}
		sort.Slice(ats, func(i, j int) bool { return ats[i].name < ats[j].name })
		linked := map[string]bool{}
		for _, a := range ats {
			if a.network == "" || b.byAddr[a.network] == nil {
				continue
			}
			linked[a.network] = true
			label := a.name
			if len(a.ipv4) > 0 {
				label += " " + strings.Join(a.ipv4, ",")
			}
			b.g.Edges = append(b.g.Edges, Edge{ID: "att:" + k + ":" + a.name, Kind: EdgeAttachment, Source: k, Target: a.network,
				Label: label, Name: a.name, IPv4: a.ipv4})
		}
		ds := b.deps[k]
		sort.Strings(ds)
		for i, d := range ds {
			// A node's attachment already draws its network dependency; a repeated or
			// dangling dependency adds nothing.
			if linked[d] || b.byAddr[d] == nil || (i > 0 && ds[i-1] == d) {
				continue
			}
			b.g.Edges = append(b.g.Edges, Edge{ID: "dep:" + k + ":" + d, Kind: EdgeDependency, Source: k, Target: d})
		}
	}
}

// attach is one node attachment: its name, its network's address and its addresses.
type attach struct {
	name, network string
	ipv4          []string
}

// networkOf finds the configured network of attachment name (state records only the name).
func networkOf(cfg []attach, name string) string {
	for _, a := range cfg {
		if a.name == name {
			return a.network
		}
	}
	return ""
}

// nodeOf reads a policy's node address from its recorded attributes, for elements that are
// only in state.
func nodeOf(attrs json.RawMessage) string {
	var v struct {
		Node string `json:"node"`
	}
	if len(attrs) == 0 || json.Unmarshal(attrs, &v) != nil {
		return ""
	}
	return v.Node
}
