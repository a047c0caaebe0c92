package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// ResetRequest names the nodes to reset. Desired holds the topology's desired actions from the
// current configuration (any op; only their specs are used): the targets' node specs and the
// specs of the policies installed in them, which the new generation must carry again.
type ResetRequest struct {
	Targets     []addrs.Instance
	Desired     []Action
	Fingerprint string
}

// Reset replaces each target node's mutable generation from its immutable baseline (S15):
//
//  1. resolve the targets and their impact (the policies living in each node);
//  2. verify the baseline artifact digests;
//  3. checkpoint the reset handle (prior object, new generation's owner);
//  4. create the replacement (Resetter.NewGeneration quiesces the prior one);
//  5. wire attachments (same MAC and IPs), guest network and routes;
//  6. start and observe it, re-install its policies;
//  7. switch the external identity in state (one CAS save);
//  8. verify ownership and delete the prior generation.
//
// Address, MAC, IPs and artifact identity stay; the external ID changes; no other node is
// touched.
func (e *Executor) Reset(ctx context.Context, req ResetRequest) (*Result, error) {
	s, rep, err := e.open(ctx, "reset")
	if err != nil {
		return &Result{Recovered: rep}, err
	}
	defer s.close()
	actions, err := e.resetActions(s.st, req)
	if err != nil {
		return &Result{Recovered: rep}, err
	}
	if err := e.Check(actions); err != nil {
		return &Result{Recovered: rep}, err
	}
	res, err := e.execute(ctx, s, "reset", req.Fingerprint, actions, nil)
	res.Recovered = rep
	return res, err
}

// resetActions resolves targets and impact (step 1) without touching anything.
func (e *Executor) resetActions(st *states.State, req ResetRequest) ([]Action, error) {
	if len(req.Targets) == 0 {
		return nil, errors.New("reset: no target given")
	}
	desired := map[string]*Action{}
	for i := range req.Desired {
		desired[req.Desired[i].Addr.String()] = &req.Desired[i]
	}
	var out []Action
	var errs []error
	seen := map[string]bool{}
	for _, t := range req.Targets {
		if seen[t.String()] {
			continue
		}
		seen[t.String()] = true
		cur := st.Resource(t)
		d := desired[t.String()]
		switch {
		case cur == nil:
			errs = append(errs, fmt.Errorf("reset %s: not in state (apply it first)", t))
			continue
		case d == nil || d.Kind != specs.KindNode || d.Node == nil:
			errs = append(errs, fmt.Errorf("reset %s: not a node of the current configuration", t))
			continue
		case d.Driver != cur.Driver:
			errs = append(errs, fmt.Errorf("reset %s: configuration selects driver %q but the node runs on %q (apply the change first)", t, d.Driver, cur.Driver))
			continue
		case cur.Observation.Status == substrate.Unknown:
			errs = append(errs, fmt.Errorf("reset %s: observation is unknown; refresh first", t))
			continue
		}
		a := *d
		a.Op = plans.Reset
		a.Reason = "reset requested"
		a.impacted = e.impactedPolicies(st, t, req.Desired)
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}

// impactedPolicies lists the desired policies whose node is addr and that are in state.
func (e *Executor) impactedPolicies(st *states.State, addr addrs.Instance, desired []Action) []Action {
	var out []Action
	for _, res := range st.Resources {
		if e.kindOf(res.Addr) != specs.KindPolicy {
			continue
		}
		for _, d := range desired {
			if d.Addr.Equal(res.Addr) && d.Policy != nil && d.Policy.Node.Equal(addr) {
				out = append(out, d)
			}
		}
	}
	return out
}

// resetNode runs the reset steps; when they fail (not crash, not an unknown observation) before
// the state switch, the replacement is deleted again and the node is recorded as degraded
// (its prior generation was quiesced): nothing created is left behind, and state says why.
func (r *run) resetNode(ctx context.Context, op *OpState) error {
	err := r.resetSteps(ctx, op)
	if err == nil || stops(ctx, err) || r.fatalErr() != nil || op.Step.atLeast(StepStateSaved) {
		return err
	}
	if op.Handle != nil {
		replacement := &PriorObject{Owner: op.Owner, Handle: *op.Handle, Attachments: op.Attachments}
		if cerr := r.removeNode(ctx, nil, replacement); cerr != nil {
			return errors.Join(err, fmt.Errorf("delete the failed replacement %s: %w", op.Handle.ExternalID, cerr))
		}
		op.Handle, op.Attachments = nil, nil
	}
	if op.Step.atLeast(StepVerified) { // the prior generation may have been quiesced
		reason := "reset failed: " + err.Error() + "; the prior generation may be quiesced: reset again"
		cerr := r.sv.commit(ctx, func(st *states.State) {
			if cur := st.Resource(op.Action.Addr); cur != nil {
				c := cur.Clone()
				c.Observation = states.Observation{Status: substrate.Degraded, Reason: reason, At: r.e.now()}
				st.Set(c)
			}
		})
		if cerr != nil {
			r.setFatal(cerr)
			return errors.Join(err, cerr)
		}
	}
	return err
}

func (r *run) resetSteps(ctx context.Context, op *OpState) error {
	a := &op.Action
	p := op.Prior
	if p == nil {
		return fmt.Errorf("reset: node is not in state")
	}
	nodes, err := driver.Get[driver.Nodes](r.e.Registry, a.Driver, driver.CapNodeLifecycle)
	if err != nil {
		return err
	}
	rs, err := driver.Get[driver.Resetter](r.e.Registry, a.Driver, driver.CapReset)
	if err != nil {
		return err
	}
	if !op.Step.atLeast(StepVerified) {
		if err := r.verifyBaseline(ctx, op, false); err != nil {
			return err
		}
		if err := r.ck(op, StepVerified); err != nil {
			return err
		}
	}
	if !op.Step.atLeast(StepStateSaved) {
		if err := r.resetGeneration(ctx, op, nodes, rs); err != nil {
			return err
		}
	}
	// Step 8: only now, with the replacement observable and saved, remove the prior generation.
	if !op.Step.atLeast(StepCleaned) {
		if err := r.removeNode(ctx, nil, p); err != nil {
			return fmt.Errorf("clean up prior generation %s (state already switched to %s): %w", p.Handle.ExternalID, op.Handle.ExternalID, err)
		}
		if err := r.ck(op, StepCleaned); err != nil {
			return err
		}
	}
	return nil
}

// resetGeneration creates (or adopts the recorded) new generation of op's node, wires,
// observes and provisions it, re-installs its policies, and switches state to it (steps 3–7).
func (r *run) resetGeneration(ctx context.Context, op *OpState, nodes driver.Nodes, rs driver.Resetter) error {
	p := op.Prior
	interrupted := provisionInterrupted(op) // before re-wiring can rewrite the step
	if err := r.adoptRecorded(ctx, op, nodes); err != nil {
		return err
	}
	if op.Step == StepBegin {
		op.Step = StepVerified // adoptRecorded rewinds to Begin; verification stays done
	}
	if op.Handle == nil {
		spec, err := r.nodeSpec(ctx, op, true)
		if err != nil {
			return err
		}
		interrupted = false // a new generation: its provisioners never ran
		h, err := rs.NewGeneration(ctx, p.Handle, p.Owner, spec)
		if err != nil {
			return fmt.Errorf("new generation: %w", err)
		}
		op.Handle = &h
		if err := r.ck(op, StepCreated); err != nil {
			return err
		}
	}
	if err := r.wireNode(ctx, op, nodes); err != nil {
		return err
	}
	obs, err := r.observeNew(ctx, op, nodes)
	if err != nil {
		return err
	}
	if !op.Step.atLeast(StepObserved) {
		if err := r.ck(op, StepObserved); err != nil {
			return err
		}
	}
	if err := r.provision(ctx, op, interrupted); err != nil {
		return err
	}
	if err := r.reapplyPolicies(ctx, op); err != nil {
		return err
	}
	// Step 7: switch the external identity (node and its policies) in one save.
	if err := r.sv.commit(ctx, r.switchGeneration(op, obs)); err != nil {
		r.setFatal(err)
		return err
	}
	return r.ck(op, StepStateSaved)
}

// switchGeneration is the state change of step 7: the node's new generation and its policies'
// new external ids.
func (r *run) switchGeneration(op *OpState, obs substrate.Observation) func(st *states.State) {
	res := r.stateResource(op, obs)
	return func(st *states.State) {
		if cur := st.Resource(res.Addr); cur != nil {
			res.CreatedAt = cur.CreatedAt
		}
		st.Set(res)
		for addr, h := range op.Policies {
			pa, _ := addrs.ParseInstance(addr)
			if pr := st.Resource(pa); pr != nil {
				c := pr.Clone()
				c.ExternalID = h.ExternalID
				priv := h.Private
				c.Private = &priv
				c.UpdatedAt = r.e.now()
				st.Set(c)
			}
		}
	}
}

// reapplyPolicies installs the policies living in the node on its new generation.
func (r *run) reapplyPolicies(ctx context.Context, op *OpState) error {
	if len(op.Impacted) == 0 {
		return nil
	}
	if op.Policies == nil {
		op.Policies = map[string]substrate.Handle{}
	}
	for _, pa := range op.Impacted {
		key := pa.Addr.String()
		if _, ok := op.Policies[key]; ok && !r.recovering {
			continue
		}
		var cur *states.Resource
		r.sv.view(func(st *states.State) {
			if c := st.Resource(pa.Addr); c != nil {
				cur = c.Clone()
			}
		})
		if cur == nil {
			continue
		}
		pol, err := driver.Get[driver.Policy](r.e.Registry, pa.Driver, driver.CapPolicy)
		if err != nil {
			return err
		}
		spec := pa.Policy.Spec
		spec.Owner = cur.Owner
		if h, ok := op.Policies[key]; ok {
			obs, err := pol.ObservePolicy(ctx, *op.Handle, h, op.Attachments, spec)
			if err != nil || obs.Status == substrate.Unknown {
				return unknownErr("policy "+h.ExternalID, obs, err)
			}
			if obs.Status == substrate.Present {
				continue
			}
		}
		h, err := pol.ApplyPolicy(ctx, *op.Handle, op.Attachments, spec)
		if err != nil {
			return fmt.Errorf("re-install policy %s: %w", key, err)
		}
		op.Policies[key] = h
		if err := r.ck(op, StepReapplied); err != nil {
			return err
		}
	}
	return nil
}

// verifyBaseline re-checks, through the artifact driver, the artifact identities op's node is
// created from (with the driver's reference from state). Any error refuses: the caller has not
// yet touched the running node. With settledOnly (a replace, whose removal runs before this
// run resolves its changed artifacts), an identity whose artifact resource this run resolves
// anew (not in state, or in state with another digest) is left to that resolve.
func (r *run) verifyBaseline(ctx context.Context, op *OpState, settledOnly bool) error {
	base, err := r.nodeSpec(ctx, op, false)
	if err != nil {
		return err
	}
	n := op.Action.Node
	for _, c := range []struct {
		id   *substrate.ArtifactIdentity
		from *addrs.Instance
	}{{base.Artifact, n.ArtifactFrom}, {base.Kernel, n.KernelFrom}} {
		if c.id == nil || settledOnly && !r.artifactSettled(c.from, c.id.Digest) {
			continue
		}
		arts, err := driver.Get[driver.Artifacts](r.e.Registry, op.Action.Driver, driver.CapArtifact)
		if err != nil {
			return fmt.Errorf("verify baseline %s: %w", c.id.Source, err)
		}
		if err := arts.VerifyArtifact(ctx, *c.id); err != nil {
			return fmt.Errorf("verify baseline %s: %w", c.id.Source, err)
		}
	}
	return nil
}

// artifactSettled reports whether the artifact resource at from is in state with digest (the
// handler's attributes carry it as "digest", the executor's summary as "artifact.digest").
func (r *run) artifactSettled(from *addrs.Instance, digest string) bool {
	if from == nil {
		return true // an identity not produced by a resource of this topology
	}
	var rec struct {
		Digest   string `json:"digest"`
		Artifact *struct {
			Digest string `json:"digest"`
		} `json:"artifact"`
	}
	settled := false
	r.sv.view(func(st *states.State) {
		ar := st.Resource(*from)
		if ar == nil || json.Unmarshal(ar.Attributes, &rec) != nil {
			return
		}
		if rec.Artifact != nil && rec.Digest == "" {
			rec.Digest = rec.Artifact.Digest
		}
		settled = rec.Digest == digest
	})
	return settled
}
