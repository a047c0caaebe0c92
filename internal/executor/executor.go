package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// DefaultParallelism bounds concurrent operations. Most of an operation is waiting on a driver
// or an fsync, so it is well above the core count.
const DefaultParallelism = 10

// Executor applies plans against drivers, checkpointing every critical substep (S14).
type Executor struct {
	Registry *driver.Registry
	State    StateStore
	// Dir holds the checkpoint log of the run in progress (next to the state, e.g. .sysbox/).
	Dir string
	// Parallelism bounds the operations in flight (0: DefaultParallelism). The operations of
	// every driver share that bound, except that a driver saying how many of its own operations
	// it tolerates (driver.Concurrency) gets a bound of that size for them alone — unless
	// FixedParallelism, when Parallelism bounds all operations together whatever the drivers say.
	// (Refresh bounds its observations by Parallelism alone.)
	Parallelism int
	// FixedParallelism is set when the user chose the parallelism (a flag, a setting).
	FixedParallelism bool
	// Resolve replaces secret references embedded in s with plaintext; it is called right
	// before the provider call that needs the value. nil refuses any value holding a reference.
	Resolve func(ctx context.Context, s string) (string, error)
	// Progress, when set, receives one event per operation start and end.
	Progress func(Event)
	// Now returns the current time (UTC); nil means time.Now.
	Now func() time.Time
	// AfterDurable, when set, is called with PointCheckpoint right after each checkpoint
	// record is durable (the run header counts as the first; a progress marker that is not
	// fsynced, see syncedBefore, right after it is written), with PointState right after
	// each state save and with PointProvisioner right after each provisioner returned. Crash tests kill the process there; nothing else should set it.
	AfterDurable func(point string)
	// Checkpointed, when set, receives a summary of each checkpoint record (the run header
	// and end too) right after it is durable (a progress marker: written), from the worker that wrote it: concurrent
	// workers call it concurrently, not necessarily in Seq order. An agent streams them to the
	// control plane's web view.
	Checkpointed func(Record)
	// Resources knows each resource type's kind (the handler registry); resources found only
	// in state (destroy, refresh, orphans) are operated by it.
	Resources Resources

	// logOpened, when set (tests), is told of each checkpoint log a run writes, after its first
	// record.
	logOpened func(*Log)
}

// kindOf returns the kind of addr's resource type ("" when unknown or without Resources).
func (e *Executor) kindOf(addr addrs.Instance) specs.Kind {
	if e.Resources == nil {
		return ""
	}
	k, _ := e.Resources.Kind(addr.Resource.Type)
	return k
}

// The points AfterDurable reports, listed in FailPoints.
const (
	PointCheckpoint  = "checkpoint"
	PointState       = "state"
	PointProvisioner = "provisioner" // right after each provisioner returned, before its outcome is recorded
)

// FailPoints are the names AfterDurable is called with.
var FailPoints = []string{PointCheckpoint, PointState, PointProvisioner}

// Event reports an operation's progress.
type Event struct {
	Addr    string
	Op      plans.Action
	Phase   string // "start" | "done" | "failed" | "skipped"
	Err     error
	Elapsed time.Duration
}

// Result summarizes a run.
type Result struct {
	Done       int     // operations completed
	Noop       int     // actions that needed nothing
	Failed     []error // one per failed or skipped operation
	Serial     uint64  // state serial after the run
	Recovered  *RecoverReport
	Checkpoint Stats
	StateSaves int
	// Audited lists the drivers destroy's residue audit consulted (the topology's drivers).
	Audited []string
	// AuditSkipped lists drivers the configuration declares that this sysbox does not provide
	// and that nothing in state or in the run used, so there is nothing to ask.
	AuditSkipped []string
}

// Err joins the failures, or nil.
func (r *Result) Err() error { return errors.Join(r.Failed...) }

// ErrUnknownObservation is wrapped when an observation is Unknown (or the driver unavailable):
// unknown is never absent, so the run stops rather than guess.
var ErrUnknownObservation = errors.New("observation unknown")

// ErrInvalidObservation is wrapped when a recorded handle names an object whose markers are
// not the operation's own. Like an unknown observation it stops the run (and recovery) with the
// checkpoint kept: the evidence is wrong, and nothing is decided on it.
var ErrInvalidObservation = errors.New("observation invalid")

// stops reports whether err must leave its operation unfinished (for recovery) rather than
// failed: an unknown or invalid observation, or a cancelled run.
func stops(ctx context.Context, err error) bool {
	return errors.Is(err, ErrUnknownObservation) || errors.Is(err, ErrInvalidObservation) || ctx.Err() != nil
}

func (e *Executor) now() time.Time {
	if e.Now != nil {
		return e.Now().UTC()
	}
	return time.Now().UTC()
}

func (e *Executor) parallelism() int {
	if e.Parallelism > 0 {
		return e.Parallelism
	}
	return DefaultParallelism
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// session is one locked use of the state.
type session struct {
	e      *Executor
	unlock func() error
	st     *states.State
}

// open locks the state, reads it, checks it is safe to act on, and finishes any interrupted
// run first (automatic recovery).
func (e *Executor) open(ctx context.Context, operation string) (*session, *RecoverReport, error) {
	unlock, err := e.State.Lock(ctx, operation)
	if err != nil {
		return nil, nil, err
	}
	s := &session{e: e, unlock: unlock}
	if err := s.read(ctx); err != nil {
		s.close()
		return nil, nil, err
	}
	var rep *RecoverReport
	if it, err := ReadLog(e.Dir); err != nil {
		s.close()
		return nil, nil, err
	} else if it != nil {
		rep, err = e.recoverLocked(ctx, s, it)
		if err != nil {
			s.close()
			return nil, rep, fmt.Errorf("recover interrupted run before %s: %w", operation, err)
		}
		if err := s.read(ctx); err != nil {
			s.close()
			return nil, rep, err
		}
	}
	return s, rep, nil
}

func (s *session) read(ctx context.Context) error {
	st, err := s.e.State.Read(ctx)
	if err != nil {
		return fmt.Errorf("read state: %w", err)
	}
	if st == nil {
		st = states.New()
	}
	if st.Outputs == nil {
		st.Outputs = map[string]states.Output{}
	}
	if err := states.Check(st, nil); err != nil {
		return err
	}
	// Private envelopes are checked by the driver that wrote them, before any mutation.
	for _, r := range st.Resources {
		if r.Private == nil || r.Driver == "" {
			continue
		}
		ns, err := driver.Get[driver.NodeState](s.e.Registry, r.Driver, driver.CapNodeState)
		if err != nil {
			continue // drivers without private state rules accept their envelopes as written
		}
		if err := ns.CheckPrivate(*r.Private); err != nil {
			return fmt.Errorf("state %s: private state: %w", r.Addr, err)
		}
	}
	s.st = st
	return nil
}

func (s *session) close() {
	if s.unlock != nil {
		_ = s.unlock()
		s.unlock = nil
	}
}

// requiredCaps lists what an action needs of its driver.
func requiredCaps(a *Action) []driver.Capability {
	switch a.Kind {
	case specs.KindArtifact:
		return []driver.Capability{driver.CapArtifact}
	case specs.KindNetwork:
		return []driver.Capability{driver.CapManagedNetwork}
	case specs.KindNode:
		caps := []driver.Capability{driver.CapNodeLifecycle}
		if a.Op == plans.Reset {
			caps = append(caps, driver.CapReset)
		}
		if a.Node != nil && len(a.Node.Attachments) > 0 {
			caps = append(caps, driver.CapNIC)
		}
		return caps
	case specs.KindPolicy:
		return []driver.Capability{driver.CapPolicy}
	}
	return nil
}

// Check validates actions and that every needed capability exists, before any mutation.
func (e *Executor) Check(actions []Action) error {
	var errs []error
	for i := range actions {
		a := &actions[i]
		if err := a.validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if a.Op == plans.NoOp || a.Driver == "" {
			continue
		}
		if err := e.Registry.Require(a.Addr.String(), a.Driver, requiredCaps(a)...); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Apply executes plan: verify (stale plan, capabilities) before any provider call, snapshot
// before destructive steps, then walk the actions with bounded parallelism.
func (e *Executor) Apply(ctx context.Context, plan *Request) (*Result, error) {
	s, rep, err := e.open(ctx, "apply")
	if err != nil {
		return &Result{Recovered: rep}, err
	}
	defer s.close()
	actions, err := plan.prepare(ctx, s.st)
	if err != nil {
		return &Result{Recovered: rep}, err
	}
	if err := e.Check(actions); err != nil {
		return &Result{Recovered: rep}, err
	}
	res, err := e.execute(ctx, s, "apply", plan.Fingerprint, actions, plan.Outputs)
	res.Recovered = rep
	return res, err
}

// prepare verifies the plan against st and returns its actions.
func (p *Request) prepare(ctx context.Context, st *states.State) ([]Action, error) {
	if p.Verify != nil {
		if err := p.Verify(ctx, st); err != nil {
			return nil, err
		}
	}
	if p.Prepare != nil {
		return p.Prepare(ctx, st)
	}
	return p.Actions, nil
}

// execute runs actions on an open session.
func (e *Executor) execute(ctx context.Context, s *session, command, fingerprint string, actions []Action, outputs func(*states.State) (map[string]states.Output, error)) (*Result, error) {
	res := &Result{Serial: s.st.Serial}
	work, destructive := classify(actions)
	if work == 0 {
		same, err := sameOutputs(s.st, outputs)
		if err != nil {
			return res, err
		}
		if same {
			res.Noop = len(actions)
			return res, nil
		}
	}
	if destructive && s.st.Serial > 0 {
		if err := e.State.Snapshot(ctx, "before "+command); err != nil {
			return res, fmt.Errorf("snapshot before %s: %w", command, err)
		}
	}
	sv := newSaver(e.State, s.st, e.now, e.AfterDurable)
	if s.st.Serial == 0 {
		// Make the lineage durable before any object carries it in its markers.
		if err := sv.commit(ctx, func(*states.State) {}); err != nil {
			return res, err
		}
	}
	log, err := createLog(e.Dir, RunHeader{Run: newRunID(), Command: command, Lineage: s.st.Lineage,
		Serial: s.st.Serial, Fingerprint: fingerprint, Started: e.now()}, e.AfterDurable, e.Checkpointed)
	if err != nil {
		return res, err
	}
	if e.logOpened != nil {
		e.logOpened(log)
	}
	r := &run{e: e, log: log, sv: sv, lineage: s.st.Lineage, fingerprint: fingerprint}
	ops := make([]*OpState, len(actions))
	for i := range actions {
		if actions[i].Op == plans.NoOp {
			res.Noop++
			continue
		}
		ops[i] = r.begin(&actions[i])
	}
	r.aliasIx = r.buildAliases(actions)
	failed := r.walk(ctx, actions, ops)
	r.sv.hurry()
	r.pending.Wait()
	if len(failed) == 0 && r.fatal == nil {
		failed = r.syncNeighbourHosts(ctx)
	}
	res.Failed = failed
	for _, op := range ops {
		if op != nil && op.Step == StepDone {
			res.Done++
		}
	}
	if outputs != nil && len(failed) == 0 {
		if err := r.saveOutputs(ctx, outputs); err != nil {
			res.Failed = append(res.Failed, err)
		}
	}
	return r.conclude(command, ops, res)
}

// classify counts the actions that do work and reports whether any destroys something.
func classify(actions []Action) (work int, destructive bool) {
	for _, a := range actions {
		if a.Op != plans.NoOp {
			work++
		}
		if a.Op == plans.Delete || a.Op == plans.Replace || a.Op == plans.Reset {
			destructive = true
		}
	}
	return work, destructive
}

// sameOutputs reports whether the outputs computed from st equal the stored ones (true when
// there are no outputs to compute), so that a run without work can end without a save.
func sameOutputs(st *states.State, outputs func(*states.State) (map[string]states.Output, error)) (bool, error) {
	if outputs == nil {
		return true, nil
	}
	out, err := outputs(st)
	if err != nil {
		return false, fmt.Errorf("outputs: %w", err)
	}
	return equalOutputs(out, st.Outputs), nil
}

// saveOutputs computes the outputs from the working state and saves them durably.
func (r *run) saveOutputs(ctx context.Context, outputs func(*states.State) (map[string]states.Output, error)) error {
	var out map[string]states.Output
	var oerr error
	r.sv.view(func(st *states.State) { out, oerr = outputs(st) })
	if oerr != nil {
		return fmt.Errorf("outputs: %w", oerr)
	}
	return r.sv.commit(ctx, func(st *states.State) { st.Outputs = out })
}

// conclude fills res's totals and closes the checkpoint log: finished (the log removed) when
// every operation is done, else kept for recovery and the run reported as interrupted.
func (r *run) conclude(command string, ops []*OpState, res *Result) (*Result, error) {
	log := r.log
	res.Serial = r.sv.serial()
	res.StateSaves = r.sv.savesDone()
	res.Checkpoint = log.Stats()
	if r.fatal != nil || r.unfinished(ops) {
		// Not finished: the log stays for recovery.
		log.Close()
		err := errors.Join(res.Failed...)
		if r.fatal != nil {
			err = errors.Join(r.fatal, err)
		}
		return res, fmt.Errorf("%s interrupted; run `sysbox recover` (or the next apply/destroy/reset recovers first): %w", command, err)
	}
	if err := log.Finish(); err != nil {
		return res, err
	}
	return res, res.Err()
}

// run is one execution with its checkpoint log and working state.
type run struct {
	e           *Executor
	log         *Log
	sv          *saver
	lineage     string
	fingerprint string
	recovering  bool

	mu      sync.Mutex
	fatal   error          // a failure that leaves the run unfinished (checkpoint or state save failed)
	pending sync.WaitGroup // operations waiting for their state save

	aliasOnce sync.Once
	aliasIx   *aliasIndex // attachment aliases by network (hosts.go)
}

func (r *run) setFatal(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fatal == nil {
		r.fatal = err
	}
}

func (r *run) owner(a addrs.Instance, gen uint64) substrate.Owner {
	return substrate.Owner{Topology: r.lineage, Address: a.String(), Type: a.Resource.Type, Generation: gen}
}

// begin prepares an operation's initial checkpoint state (written by the worker, before its
// first provider call).
func (r *run) begin(a *Action) *OpState {
	op := &OpState{Addr: a.Addr.String(), Op: a.Op, Step: StepBegin, Fingerprint: r.fingerprint, Action: *a, Impacted: a.impacted}
	var prior *states.Resource
	r.sv.view(func(st *states.State) {
		if p := st.Resource(a.Addr); p != nil {
			prior = p.Clone()
			op.Prior = r.priorObject(st, a, p)
		}
	})
	gen := uint64(1)
	if prior != nil {
		switch a.Op {
		case plans.Replace, plans.Reset:
			gen = prior.Owner.Generation + 1
		case plans.Update, plans.Delete, plans.Read:
			gen = prior.Owner.Generation
		case plans.Create:
			gen = prior.Owner.Generation + 1 // state still holds something: never reuse its markers
		}
	}
	if gen == 0 {
		gen = 1
	}
	op.Owner = r.owner(a.Addr, gen)
	return op
}

// priorObject captures what an operation will remove. Called with the state locked.
func (r *run) priorObject(st *states.State, a *Action, p *states.Resource) *PriorObject {
	po := &PriorObject{Owner: p.Owner, Handle: handleOf(p), Attachments: p.Attachments}
	if a.Kind == specs.KindPolicy {
		node := r.e.policyNode(a, p)
		if n := st.Resource(node); n != nil {
			h := handleOf(n)
			po.Node = &h
		}
	}
	return po
}

// policyNode finds the node a policy lives in: the desired spec's, else the one dependency of
// kind node recorded in state.
func (e *Executor) policyNode(a *Action, p *states.Resource) addrs.Instance {
	if a.Policy != nil {
		return a.Policy.Node
	}
	if p != nil {
		for _, d := range p.Dependencies {
			if e.kindOf(d) == specs.KindNode {
				return d
			}
		}
	}
	return addrs.Instance{}
}

func handleOf(r *states.Resource) substrate.Handle {
	h := substrate.Handle{Driver: r.Driver, ExternalID: r.ExternalID}
	if r.Private != nil {
		h.Private = *r.Private
	}
	return h
}

// ck durably records op; a failure is fatal to the run (no step may run unrecorded).
func (r *run) ck(op *OpState, step Step) error {
	op.Step = step
	op.written = true
	if err := r.log.Checkpoint(op); err != nil {
		r.setFatal(err)
		return err
	}
	return nil
}

func (r *run) event(ev Event) {
	if r.e.Progress != nil {
		r.e.Progress(ev)
	}
}

// walk runs the operations: first every delete (and the delete half of every replace) in
// reverse dependency order, then everything else in dependency order. A failed operation
// skips the operations that wait for it. It returns one error per failed or skipped operation.
func (r *run) walk(ctx context.Context, actions []Action, ops []*OpState) []error {
	idx := make(map[string]int, len(actions))
	for i := range actions {
		idx[actions[i].Addr.String()] = i
	}
	var (
		mu     sync.Mutex
		errs   []error
		failed = make([]bool, len(actions))
	)
	name := func(i int) string { return actions[i].Addr.String() }
	record := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		failed[i] = true
		errs = append(errs, err)
	}
	isFailed := func(i int) bool {
		mu.Lock()
		defer mu.Unlock()
		return failed[i]
	}
	// Phase 1: removals, dependents before their dependencies.
	var removals []int
	for i, op := range ops {
		if op != nil && needsRemoval(op) {
			removals = append(removals, i)
		}
	}
	after := map[int][]int{} // i waits for after[i]
	isRemoval := make(map[string]int, len(removals))
	for _, i := range removals {
		isRemoval[actions[i].Addr.String()] = i
	}
	for _, j := range removals {
		// j depends on i: j (the dependent) goes first, so i waits for j.
		for _, d := range depsOf(&actions[j]) {
			if i, ok := isRemoval[d.String()]; ok && i != j {
				after[i] = append(after[i], j)
			}
		}
	}
	pool := r.e.pools(actions)
	r.schedule(ctx, removals, after, name, pool, isFailed, func(i int) {
		if err := r.removePart(ctx, ops[i]); err != nil {
			record(i, err)
		}
	}, func(i int, reason error) {
		record(i, fmt.Errorf("%s: %s skipped: %w", actions[i].Addr, actions[i].Op, reason))
	})
	// Phase 2: everything else, dependencies first.
	var rest []int
	for i, op := range ops {
		if op != nil && !failed[i] && needsCreation(op) {
			rest = append(rest, i)
		}
	}
	after = map[int][]int{}
	for _, i := range rest {
		for _, d := range depsOf(&actions[i]) {
			if j, ok := idx[d.String()]; ok && j != i && ops[j] != nil && needsCreation(ops[j]) {
				after[i] = append(after[i], j)
			}
		}
	}
	r.schedule(ctx, rest, after, name, pool, isFailed, func(i int) {
		if err := r.createPart(ctx, ops[i]); err != nil {
			record(i, err)
		}
	}, func(i int, reason error) {
		record(i, fmt.Errorf("%s: %s skipped: %w", actions[i].Addr, actions[i].Op, reason))
	})
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
	return errs
}

func needsRemoval(op *OpState) bool {
	switch op.Op {
	case plans.Delete:
		return !op.Step.Terminal()
	case plans.Replace:
		return !op.Step.atLeast(StepDeleted) && !op.Step.Terminal()
	}
	return false
}

func needsCreation(op *OpState) bool {
	switch op.Op {
	case plans.Delete, plans.NoOp:
		return false
	}
	return !op.Step.Terminal()
}

// depsOf lists everything a must come after (and be removed before).
func depsOf(a *Action) []addrs.Instance {
	out := append([]addrs.Instance(nil), a.Deps...)
	if a.Policy != nil {
		out = append(out, a.Policy.Node)
	}
	if a.Node != nil {
		for _, at := range a.Node.Attachments {
			out = append(out, at.Network)
		}
	}
	return out
}

// pools returns, for each action index, the semaphore bounding its operation in flight: one
// pool of Parallelism shared by every driver, and — unless FixedParallelism — one of its own for
// each driver of actions that says how many operations it tolerates (driver.Concurrency).
func (e *Executor) pools(actions []Action) func(i int) chan struct{} {
	shared := make(chan struct{}, e.parallelism())
	if e.FixedParallelism {
		return func(int) chan struct{} { return shared }
	}
	own := map[string]chan struct{}{} // a nil entry: the driver was looked at and shares
	for _, a := range actions {
		if _, seen := own[a.Driver]; seen || a.Driver == "" {
			continue
		}
		own[a.Driver] = nil
		d, err := e.Registry.Driver(a.Driver)
		if err != nil {
			continue // Check reported it
		}
		if c, ok := d.(driver.Concurrency); ok {
			if n := c.MaxInFlight(); n > 0 {
				own[a.Driver] = make(chan struct{}, n)
			}
		}
	}
	return func(i int) chan struct{} {
		if s := own[actions[i].Driver]; s != nil {
			return s
		}
		return shared
	}
}

func (r *run) fatalErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// fail records a terminal failure of op. What exists is already in state (saved by the step
// that created it) or is recorded by markNode below.
func (r *run) fail(ctx context.Context, op *OpState, err error) error {
	err = fmt.Errorf("%s: %s: %w", op.Addr, op.Op, err)
	r.event(Event{Addr: op.Addr, Op: op.Op, Phase: "failed", Err: err})
	if stops(ctx, err) || r.fatalErr() != nil {
		// Stop without a terminal record: recovery must look again (an interrupted operation
		// is resumed, not given up).
		return err
	}
	op.Error = err.Error()
	_ = r.ck(op, StepFailed)
	return err
}

// resolveEnv turns an environment with secret references into plaintext for one call.
func (r *run) resolveEnv(ctx context.Context, env map[string]string) (map[string]string, error) {
	if len(env) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(env))
	for k, v := range env {
		if !strings.Contains(v, "secret://") {
			out[k] = v
			continue
		}
		if r.e.Resolve == nil {
			return nil, fmt.Errorf("environment %s: holds a secret reference but no resolver is configured", k)
		}
		pv, err := r.e.Resolve(ctx, v)
		if err != nil {
			return nil, fmt.Errorf("environment %s: %w", k, err)
		}
		out[k] = pv
	}
	return out, nil
}

// summary is the public attribute record the executor stores when the handler gave none.
type summary struct {
	Kind       specs.Kind                  `json:"kind"`
	Generation uint64                      `json:"generation,omitempty"`
	Artifact   *substrate.ArtifactIdentity `json:"artifact,omitempty"`
	Node       string                      `json:"node,omitempty"`
	Digest     string                      `json:"digest,omitempty"`
	IPv4CIDR   string                      `json:"ipv4_cidr,omitempty"`
}

func (r *run) attributes(op *OpState) json.RawMessage {
	a := &op.Action
	if a.Attributes != nil {
		return a.Attributes
	}
	s := summary{Kind: a.Kind, Generation: op.Owner.Generation}
	switch {
	case a.Node != nil:
		s.Artifact = a.Node.Spec.Artifact
	case a.Policy != nil:
		s.Node = a.Policy.Node.String()
		s.Digest = a.Policy.Spec.Digest()
	case a.Network != nil:
		s.IPv4CIDR = a.Network.IPv4CIDR
	case a.Artifact != nil:
		s.Artifact = op.Artifact
	}
	b, _ := json.Marshal(s)
	return b
}

// stateResource builds the state entry for op's new object.
func (r *run) stateResource(op *OpState, obs substrate.Observation) *states.Resource {
	a := &op.Action
	now := r.e.now()
	sv := a.SchemaVersion
	if sv == 0 {
		sv = 1
	}
	res := &states.Resource{Addr: a.Addr, SchemaVersion: sv, Driver: a.Driver, Attributes: r.attributes(op),
		Dependencies: a.Deps, Attachments: op.Attachments, Owner: op.Owner, CreatedAt: now, UpdatedAt: now,
		Observation: states.Observation{Status: obs.Status, Reason: obs.Reason, At: now}}
	if res.Observation.Status == "" {
		res.Observation.Status = substrate.Present
	}
	if op.Handle != nil {
		res.ExternalID = op.Handle.ExternalID
		if p := op.Handle.Private; p.Driver != "" || p.Data != nil {
			res.Private = &p
		}
	}
	return res
}

// save records op's resulting object in the working state and finishes op (its Done record
// and progress event) once the state save including it is durable. It does not wait: the
// operation's checkpoint already holds everything recovery needs to save it again.
func (r *run) save(ctx context.Context, op *OpState, obs substrate.Observation) error {
	res := r.stateResource(op, obs)
	r.pending.Add(1)
	r.sv.commitAsync(ctx, setResource(res), func(err error) {
		defer r.pending.Done()
		if err != nil {
			r.setFatal(err)
			return
		}
		r.finish(op)
	})
	return nil
}

// saveSync records op's object and waits until it is durable.
func (r *run) saveSync(ctx context.Context, op *OpState, obs substrate.Observation) error {
	if err := r.sv.commit(ctx, setResource(r.stateResource(op, obs))); err != nil {
		r.setFatal(err)
		return err
	}
	return nil
}

func setResource(res *states.Resource) func(st *states.State) {
	return func(st *states.State) {
		if p := st.Resource(res.Addr); p != nil && p.Owner.Equal(res.Owner) {
			res.CreatedAt = p.CreatedAt
		}
		st.Set(res)
	}
}

// finish writes op's Done record and reports it.
func (r *run) finish(op *OpState) {
	if err := r.ck(op, StepDone); err != nil {
		return
	}
	r.event(Event{Addr: op.Addr, Op: op.Op, Phase: "done", Elapsed: time.Since(op.started)})
}

// unknownErr turns an Unknown observation into an error that stops the run.
func unknownErr(what string, obs substrate.Observation, err error) error {
	if err != nil {
		return fmt.Errorf("observe %s: %w: %w", what, ErrUnknownObservation, err)
	}
	return fmt.Errorf("observe %s: %w: %s", what, ErrUnknownObservation, obs.Reason)
}

// ours reports whether an observation proves the object carries exactly owner's markers.
func ours(obs substrate.Observation, owner substrate.Owner) bool {
	return obs.Owner != nil && obs.Owner.Equal(owner)
}

// ignoreNotFound treats "already gone" as done for idempotent removal.
func ignoreNotFound(err error) error {
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	}
	return err
}

func equalOutputs(a, b map[string]states.Output) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || string(v.Value) != string(w.Value) {
			return false
		}
	}
	return true
}
