package plans

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/graph"
	"zyvor.dev/sysbox/pkg/substrate"
)

// FormatVersion is the plan format this build writes (and the JSON "format_version").
const FormatVersion = "1"

// CapabilityChecker answers whether a driver declares capabilities (*driver.Registry does).
type CapabilityChecker interface {
	Require(address, driverName string, caps ...driver.Capability) error
	Descriptors() []driver.Descriptor
}

var _ CapabilityChecker = (*driver.Registry)(nil)

// InPlaceRepairer is implemented by handlers whose drifted objects are repaired by an in-place
// update (policy tables are re-applied atomically) rather than replaced.
type InPlaceRepairer interface {
	RepairsInPlace() bool
}

// Planner makes plans. It holds no state between calls.
type Planner struct {
	Handlers     Handlers
	Capabilities CapabilityChecker
	ToolVersion  string
}

// Request is one planning problem.
type Request struct {
	Topology *config.Topology
	Prior    PriorState
	Facts    Facts
	Destroy  bool           // plan the deletion of everything in prior state
	Targets  []addrs.Target // limit to these and what they depend on
}

// Plan is the ordered action list and what it was computed from.
type Plan struct {
	FormatVersion string           `json:"format_version,omitempty"` // the JSON output's; stored plans carry only their record version
	ToolVersion   string           `json:"tool_version"`
	Mode          string           `json:"mode"` // "normal" or "destroy"
	Targets       []string         `json:"targets,omitempty"`
	Actions       []ResourceAction `json:"actions"`
	Fingerprint   Fingerprint      `json:"fingerprint"`
}

// ResourceAction is one entry of the action list.
type ResourceAction struct {
	Address       addrs.Instance      `json:"address"`
	Action        Action              `json:"action"`
	Reason        string              `json:"reason"`
	Type          string              `json:"type"`
	Mode          string              `json:"mode"` // managed | data
	SchemaVersion int                 `json:"schema_version"`
	Before        json.RawMessage     `json:"before,omitempty"`
	After         json.RawMessage     `json:"after,omitempty"`
	Changes       []AttrChange        `json:"changes,omitempty"`
	DependsOn     []addrs.Instance    `json:"depends_on,omitempty"`
	Driver        string              `json:"driver,omitempty"`
	Requires      []driver.Capability `json:"requires,omitempty"`
}

// Fingerprint binds a plan to everything it was computed from (S11).
type Fingerprint struct {
	SourceDigest   string              `json:"source_digest"`
	InputDigest    string              `json:"input_digest"`
	Lineage        string              `json:"lineage"`
	Serial         uint64              `json:"serial"`
	SchemaVersions map[string]int      `json:"schema_versions"`
	Drivers        []driver.Descriptor `json:"drivers"`
	Artifacts      map[string]string   `json:"artifacts"`
	ActionsDigest  string              `json:"actions_digest"`
}

// HasChanges reports whether applying the plan would change anything.
func (p *Plan) HasChanges() bool {
	for _, a := range p.Actions {
		if a.Action != NoOp && a.Action != Read {
			return true
		}
	}
	return false
}

// Applicable returns an error naming every unknown action (S10: unknown cannot be applied).
func (p *Plan) Applicable() error {
	var errs []error
	for _, a := range p.Actions {
		if a.Action == Unknown {
			errs = append(errs, fmt.Errorf("%s: action unknown (%s): refresh once it can be observed", a.Address, a.Reason))
		}
	}
	return errors.Join(errs...)
}

// Counts tallies actions by kind.
func (p *Plan) Counts() map[Action]int {
	m := map[Action]int{}
	for _, a := range p.Actions {
		m[a.Action]++
	}
	return m
}

// PreventDestroyError is returned when a plan would delete or replace a protected instance.
type PreventDestroyError struct {
	Addr   addrs.Instance
	Action Action
	Reason string
}

func (e *PreventDestroyError) Error() string {
	return fmt.Sprintf("%s: lifecycle.prevent_destroy is set, but the plan would %s it (%s); remove the protection or change the configuration", e.Addr, e.Action, e.Reason)
}

// SchemaVersionError refuses state written with another schema version (S12).
type SchemaVersionError struct {
	Addr           addrs.Instance
	State, Current int
}

func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("%s: state has schema version %d, this sysbox uses %d and has no upgrade for it: destroy with the sysbox that created it, then apply again", e.Addr, e.State, e.Current)
}

// Plan computes the plan for req.
func (p *Planner) Plan(req Request) (*Plan, error) {
	in := indexRequest(req)
	g, order, orderErr := dependencyOrder(req.Topology, in.desiredList)
	inScope, err := in.scope(req.Targets, g)
	if err != nil {
		return nil, err
	}
	if orderErr != nil {
		return nil, orderErr
	}

	plan := &Plan{FormatVersion: FormatVersion, ToolVersion: p.ToolVersion, Mode: "normal"}
	if req.Destroy {
		plan.Mode = "destroy"
	}
	for _, t := range req.Targets {
		plan.Targets = append(plan.Targets, t.String())
	}
	planned := map[string]Action{}
	errs, err := p.planDeletions(req, in, inScope, plan, planned)
	if err != nil {
		return nil, err
	}
	if !req.Destroy {
		errs = append(errs, p.planChanges(req, in, order, inScope, plan, planned)...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	plan.Fingerprint = p.fingerprint(plan, req.Topology, req)
	return plan, nil
}

// dependencyOrder returns the graph over the configured instances and its topological order:
// the ones evaluation built to look for cycles when it did, else built here.
func dependencyOrder(top *config.Topology, desired []*config.ResourceInstance) (*graph.Graph, []addrs.Instance, error) {
	if top != nil {
		if g, order, ok := top.DependencyGraph(); ok {
			return g, order, nil
		}
	}
	g := graph.NewSized(len(desired))
	for _, ri := range desired {
		g.ConnectShared(ri.Addr, ri.DependsOn) // instances of a resource share one list (config)
	}
	order, err := g.TopoOrder()
	return g, order, err
}

// planInputs indexes a request's prior state and configured instances by address.
type planInputs struct {
	prior           map[string]PriorResource
	priorList       []PriorResource
	desired         map[string]*config.ResourceInstance
	desiredList     []*config.ResourceInstance
	declaredDrivers map[string]bool // drivers an explicit substrate block declares
}

func indexRequest(req Request) *planInputs {
	in := &planInputs{prior: map[string]PriorResource{}, desired: map[string]*config.ResourceInstance{}, declaredDrivers: map[string]bool{}}
	if req.Prior != nil {
		in.priorList = req.Prior.Resources()
		for _, r := range in.priorList {
			in.prior[r.Addr.UniqueKey()] = r
		}
	}
	if top := req.Topology; top != nil {
		in.desiredList = top.Resources
		for _, ri := range in.desiredList {
			in.desired[ri.Addr.UniqueKey()] = ri
		}
		if top.Substrate.Explicit {
			for _, d := range top.Substrate.Drivers {
				in.declaredDrivers[d.Name] = true
			}
		}
	}
	return in
}

// scope returns which instances the plan covers: all, or with -target the targets, what they
// depend on, and targeted deletions.
func (in *planInputs) scope(targets []addrs.Target, g *graph.Graph) (func(addrs.Instance) bool, error) {
	if len(targets) == 0 {
		return func(addrs.Instance) bool { return true }, nil
	}
	var keep []addrs.Instance
	for _, ri := range in.desiredList {
		if targeted(targets, ri.Addr) {
			keep = append(keep, ri.Addr)
		}
	}
	for _, r := range in.priorList {
		if targeted(targets, r.Addr) && in.desired[r.Addr.UniqueKey()] == nil {
			keep = append(keep, r.Addr) // a targeted deletion
		}
	}
	if len(keep) == 0 {
		var ts []string
		for _, t := range targets {
			ts = append(ts, t.String())
		}
		return nil, fmt.Errorf("-target %s: matches no resource in the configuration or state", strings.Join(ts, ", "))
	}
	sub := g.Subgraph(keep)
	return func(a addrs.Instance) bool { return sub.Has(a) || targeted(targets, a) }, nil
}

// planDeletions appends, in destroy order, the deletions of prior instances that are not
// configured (or of everything, in destroy mode). It returns the problems found per resource;
// err is a prior state that cannot be ordered.
func (p *Planner) planDeletions(req Request, in *planInputs, inScope func(addrs.Instance) bool, plan *Plan, planned map[string]Action) (errs []error, err error) {
	fail := func(err error) { errs = append(errs, err) }
	var dels []PriorResource
	for _, r := range in.priorList {
		if !inScope(r.Addr) {
			continue
		}
		if req.Destroy || in.desired[r.Addr.UniqueKey()] == nil {
			dels = append(dels, r)
		}
	}
	pg := graph.New()
	for _, r := range dels {
		pg.Add(r.Addr)
	}
	for _, r := range dels {
		for _, d := range r.Dependencies {
			if pg.Has(d) {
				pg.Connect(r.Addr, d)
			}
		}
	}
	delOrder, err := pg.DestroyOrder()
	if err != nil {
		return nil, fmt.Errorf("prior state: %w", err)
	}
	for _, a := range delOrder {
		r := in.prior[a.UniqueKey()]
		act := ResourceAction{Address: r.Addr, Action: Delete, Type: r.Addr.Resource.Type, Mode: r.Addr.Resource.Mode.String(),
			SchemaVersion: r.SchemaVersion, Before: r.Attributes, DependsOn: r.Dependencies}
		if req.Destroy {
			act.Reason = "destroy requested"
		} else {
			act.Reason = "no longer in the configuration"
		}
		if r.Addr.Resource.Mode == addrs.Data {
			continue // data sources own nothing
		}
		if r.Status == substrate.Unknown {
			act.Action, act.Reason = Unknown, "observation unknown ("+orText(r.StatusReason, "driver could not observe it")+"); cannot plan its deletion"
		} else if r.Status == substrate.Absent {
			act.Reason += "; already observed absent (only state is updated)"
		}
		if ri := in.desired[r.Addr.UniqueKey()]; ri != nil && ri.PreventDestroy && act.Action == Delete {
			fail(&PreventDestroyError{Addr: r.Addr, Action: Delete, Reason: act.Reason})
		}
		h, ok := p.Handlers.Handler(r.Addr.Resource.Mode, r.Addr.Resource.Type)
		if !ok {
			fail(fmt.Errorf("%s: state holds a resource of unknown type %q", r.Addr, r.Addr.Resource.Type))
			continue
		}
		if r.SchemaVersion != h.SchemaVersion() {
			fail(&SchemaVersionError{Addr: r.Addr, State: r.SchemaVersion, Current: h.SchemaVersion()})
			continue
		}
		p.require(&act, h, r.Attributes, in.declaredDrivers, fail)
		planned[r.Addr.UniqueKey()] = act.Action
		plan.Actions = append(plan.Actions, act)
	}
	return errs, nil
}

// planChanges appends, in create order, the action of every configured instance in scope and
// returns the problems found, in create order: 1. each instance on its own (parallel),
// 2. dependencies in create order, 3. driver requirements (parallel).
func (p *Planner) planChanges(req Request, in *planInputs, order []addrs.Instance, inScope func(addrs.Instance) bool, plan *Plan, planned map[string]Action) []error {
	var todo []*config.ResourceInstance
	for _, a := range order {
		if inScope(a) {
			todo = append(todo, in.desired[a.UniqueKey()])
		}
	}
	acts := make([]ResourceAction, len(todo))
	hs := make([]Handler, len(todo))
	errsAt := make([][]error, len(todo))
	parallel(len(todo), func(i int) {
		var err error
		acts[i], hs[i], err = p.ownPlan(todo[i], in.prior, req.Facts)
		if err != nil {
			errsAt[i] = append(errsAt[i], err)
		}
	})
	changing := 0 // planned Replace and Create actions (deletions are planned neither)
	for i, ri := range todo {
		if hs[i] == nil {
			continue
		}
		if err := dependencyPlan(&acts[i], hs[i], ri, planned, changing > 0); err != nil {
			errsAt[i] = append(errsAt[i], err)
			hs[i] = nil
			continue
		}
		planned[ri.Addr.UniqueKey()] = acts[i].Action
		if a := acts[i].Action; a == Replace || a == Create {
			changing++
		}
	}
	parallel(len(todo), func(i int) {
		if hs[i] != nil {
			p.require(&acts[i], hs[i], acts[i].After, in.declaredDrivers, func(err error) { errsAt[i] = append(errsAt[i], err) })
		}
	})
	if len(todo) > 0 {
		plan.Actions = slices.Grow(plan.Actions, len(todo)) // one allocation, not ~30 (nil stays nil: no todo)
	}
	var errs []error
	for i := range todo {
		errs = append(errs, errsAt[i]...)
		if hs[i] != nil {
			plan.Actions = append(plan.Actions, acts[i])
		}
	}
	return errs
}

func orText(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func targeted(ts []addrs.Target, a addrs.Instance) bool {
	for _, t := range ts {
		if t.Contains(a) {
			return true
		}
	}
	return false
}

// ownPlan is the part of an instance's planning that depends only on the instance, its prior
// state and the facts: the handler's desired form and its own diff. It runs in parallel.
func (p *Planner) ownPlan(ri *config.ResourceInstance, prior map[string]PriorResource, facts Facts) (ResourceAction, Handler, error) {
	h, ok := p.Handlers.Handler(ri.Addr.Resource.Mode, ri.Addr.Resource.Type)
	if !ok {
		return ResourceAction{}, nil, fmt.Errorf("%s: no handler for type %q", ri.Addr, ri.Addr.Resource.Type)
	}
	after, err := h.Desired(ri, facts)
	if err != nil {
		return ResourceAction{}, nil, err
	}
	act := ResourceAction{Address: ri.Addr, Type: ri.Addr.Resource.Type, Mode: ri.Addr.Resource.Mode.String(),
		SchemaVersion: h.SchemaVersion(), After: after, DependsOn: ri.DependsOn}
	if ri.Addr.Resource.Mode == addrs.Data {
		act.Action, act.Reason = Read, "data sources are read on every apply"
		return act, h, nil
	}
	pr, exists := prior[ri.Addr.UniqueKey()]
	if k, ok := h.(PriorKeeper); ok && exists && len(pr.Attributes) > 0 {
		if act.After, err = k.KeepFromPrior(ri, pr.Attributes, after); err != nil {
			return ResourceAction{}, nil, fmt.Errorf("%s: %w", ri.Addr, err)
		}
		after = act.After
	}
	switch {
	case !exists:
		act.Action, act.Reason = Create, "not in state"
	case pr.SchemaVersion != h.SchemaVersion():
		return ResourceAction{}, nil, &SchemaVersionError{Addr: ri.Addr, State: pr.SchemaVersion, Current: h.SchemaVersion()}
	case pr.Status == substrate.Unknown:
		act.Before = pr.Attributes
		act.Action, act.Reason = Unknown, "observation unknown ("+orText(pr.StatusReason, "driver could not observe it")+"); refresh once it can be observed"
	case pr.Status == substrate.Absent:
		act.Before = pr.Attributes
		act.Action, act.Reason = Create, "observed absent (deleted outside sysbox)"
	default:
		act.Before = pr.Attributes
		d, err := h.Diff(pr.Attributes, after)
		if err != nil {
			return ResourceAction{}, nil, fmt.Errorf("%s: diff: %w", ri.Addr, err)
		}
		act.Action, act.Reason, act.Changes = d.Action, d.Reason, d.Changes
		if pr.Status == substrate.Drifted || pr.Status == substrate.Degraded {
			why := "observed " + string(pr.Status) + " (" + orText(pr.StatusReason, "departs from state") + ")"
			if r, ok := h.(InPlaceRepairer); ok && r.RepairsInPlace() && act.Action != Replace {
				act.Action, act.Reason = Update, why+"; re-applied in place"
			} else if act.Action != Replace {
				act.Action, act.Reason = Replace, why+"; converges by replacement"
			} else {
				act.Reason = why + "; " + act.Reason
			}
		}
	}
	return act, h, nil
}

// dependencyPlan applies, in create order, what the dependencies' actions mean for act as its
// handler judges them (no automatic cascade), then lifecycle.prevent_destroy. changing says
// whether planned holds any Replace or Create (if not, no dependency can matter).
func dependencyPlan(act *ResourceAction, h Handler, ri *config.ResourceInstance, planned map[string]Action, changing bool) error {
	if changing && (act.Action == NoOp || act.Action == Update) {
		for _, dep := range ri.DependsOn {
			da := planned[dep.UniqueKey()]
			if da != Replace && da != Create {
				continue
			}
			if a, why := h.DependencyChanged(ri, dep, da); a == Replace {
				act.Action, act.Reason = Replace, why
				break
			}
		}
	}
	if act.Action == Replace && ri.PreventDestroy {
		return &PreventDestroyError{Addr: ri.Addr, Action: Replace, Reason: act.Reason}
	}
	return nil
}

// parallel runs fn(i) for i in [0, n) on all CPUs.
func parallel(n int, fn func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := 0; i < n; i++ {
			fn(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

// require records the driver and capabilities an action needs and checks them.
func (p *Planner) require(act *ResourceAction, h Handler, attrs json.RawMessage, declared map[string]bool, fail func(error)) {
	if len(attrs) == 0 {
		return
	}
	r, err := h.Requirements(attrs, act.Action)
	if err != nil {
		fail(fmt.Errorf("%s: requirements: %w", act.Address, err))
		return
	}
	act.Driver, act.Requires = r.Driver, r.Capabilities
	if r.Driver != "" && len(declared) > 0 && !declared[r.Driver] && act.Action != Delete && act.Action != NoOp {
		var names []string
		for n := range declared {
			names = append(names, n)
		}
		sort.Strings(names)
		fail(fmt.Errorf("%s: driver %q is not declared in the substrate block (declared: %s)", act.Address, r.Driver, strings.Join(names, ", ")))
		return
	}
	if len(r.Capabilities) == 0 || act.Action == Unknown {
		return
	}
	if p.Capabilities == nil {
		fail(fmt.Errorf("%s: no driver registry to check %s capabilities %v", act.Address, r.Driver, r.Capabilities))
		return
	}
	if err := p.Capabilities.Require(act.Address.String(), r.Driver, r.Capabilities...); err != nil {
		fail(err)
	}
}

func (p *Planner) fingerprint(plan *Plan, top *config.Topology, req Request) Fingerprint {
	fp := Fingerprint{SchemaVersions: map[string]int{}, Artifacts: map[string]string{}}
	if top != nil {
		fp.SourceDigest = top.Sources.Digest()
		fp.InputDigest = top.InputDigest()
	}
	if req.Prior != nil {
		fp.Lineage, fp.Serial = req.Prior.Lineage(), req.Prior.Serial()
	}
	used := map[string]bool{}
	for _, a := range plan.Actions {
		fp.SchemaVersions[a.Type] = a.SchemaVersion
		if a.Driver != "" {
			used[a.Driver] = true
		}
		if a.Type == "sysbox_artifact" {
			if id, ok := req.Facts.Artifacts[a.Address.String()]; ok {
				fp.Artifacts[a.Address.String()] = id.Digest
			}
		}
	}
	if p.Capabilities != nil {
		for _, d := range p.Capabilities.Descriptors() {
			if used[d.Name] {
				caps := append([]driver.Capability(nil), d.Capabilities...)
				sort.Slice(caps, func(i, j int) bool { return caps[i] < caps[j] })
				fp.Drivers = append(fp.Drivers, driver.Descriptor{Name: d.Name, Version: d.Version, Capabilities: caps})
			}
		}
	}
	fp.ActionsDigest = ActionsDigest(plan.Actions)
	return fp
}
