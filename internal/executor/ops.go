package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Each operation is a small state machine over Steps. It starts from whatever step its
// checkpoint says (StepBegin for a fresh run) and, when resuming, observes what a recorded
// handle names before trusting it. The same code runs a fresh apply and a recovery.

// removePart deletes op's prior object (delete, and the first half of replace).
func (r *run) removePart(ctx context.Context, op *OpState) error {
	op.started = time.Now()
	if op.Step == StepBegin {
		if err := r.ck(op, StepBegin); err != nil {
			return err
		}
		r.event(Event{Addr: op.Addr, Op: op.Op, Phase: "start"})
	}
	if err := r.remove(ctx, op); err != nil {
		return r.fail(ctx, op, err)
	}
	a := &op.Action
	remove := func(st *states.State) { st.Remove(a.Addr) }
	if op.Op != plans.Delete {
		r.sv.commitAsync(ctx, remove, nil) // replace: the create half saves again
		return nil
	}
	r.pending.Add(1)
	r.sv.commitAsync(ctx, remove, func(err error) {
		defer r.pending.Done()
		if err != nil {
			r.setFatal(err)
			return
		}
		r.finish(op)
	})
	return nil
}

// remove deletes the prior object through its driver, re-checking ownership markers there.
func (r *run) remove(ctx context.Context, op *OpState) error {
	if op.Step.atLeast(StepDeleted) || op.Prior == nil {
		return nil
	}
	a := &op.Action
	p := op.Prior
	drv := p.Handle.Driver
	switch a.Kind {
	case specs.KindArtifact:
		// Nothing external.
	case specs.KindNetwork:
		nets, err := driver.Get[driver.Networks](r.e.Registry, drv, driver.CapManagedNetwork)
		if err != nil {
			return err
		}
		if err := ignoreNotFound(nets.DeleteNetwork(ctx, p.Handle, p.Owner)); err != nil {
			return fmt.Errorf("delete network %s: %w", p.Handle.ExternalID, err)
		}
	case specs.KindNode:
		if op.Op == plans.Replace {
			// The new generation's baseline must verify before the running one is removed: a
			// changed, unreadable or unavailable baseline keeps the node.
			if err := r.verifyBaseline(ctx, op, true); err != nil {
				return fmt.Errorf("replace %s: %w (the running node %s was kept)", op.Addr, err, p.Handle.ExternalID)
			}
		}
		if err := r.removeNode(ctx, op, p); err != nil {
			return err
		}
	case specs.KindPolicy:
		if p.Node != nil {
			pol, err := driver.Get[driver.Policy](r.e.Registry, drv, driver.CapPolicy)
			if err != nil {
				return err
			}
			if err := ignoreNotFound(pol.DeletePolicy(ctx, *p.Node, p.Handle, p.Owner)); err != nil {
				return fmt.Errorf("delete policy %s: %w", p.Handle.ExternalID, err)
			}
		} // else: its node is gone from state, and the policy with it
	}
	return r.ck(op, StepDeleted)
}

// removeNode detaches (unless DeleteNode does: driver.NICRemover), stops (see
// stopBeforeDelete) and deletes node generation p; the driver re-checks its markers against p's
// owner on each call. With op (a delete, or a replace's first half) the detaching is
// checkpointed as StepDetached and not repeated once op got that far; reset removes its prior
// generation, or a failed replacement, with op nil.
func (r *run) removeNode(ctx context.Context, op *OpState, p *PriorObject) error {
	nodes, err := driver.Get[driver.Nodes](r.e.Registry, p.Handle.Driver, driver.CapNodeLifecycle)
	if err != nil {
		return err
	}
	if (op == nil || !op.Step.atLeast(StepDetached)) && len(p.Attachments) > 0 && !deleteRemovesNICs(nodes) {
		nics, err := driver.Get[driver.NICs](r.e.Registry, p.Handle.Driver, driver.CapNIC)
		if err != nil {
			return err
		}
		for _, at := range p.Attachments {
			if err := ignoreNotFound(nics.Detach(ctx, p.Handle, at, p.Owner)); err != nil {
				return fmt.Errorf("detach %s from %s: %w", at.Name, p.Handle.ExternalID, err)
			}
		}
		if op != nil {
			if err := r.ck(op, StepDetached); err != nil {
				return err
			}
		}
	}
	if stopBeforeDelete(nodes) {
		if err := ignoreNotFound(nodes.StopNode(ctx, p.Handle, p.Owner)); err != nil {
			return fmt.Errorf("stop node %s: %w", p.Handle.ExternalID, err)
		}
	}
	if err := ignoreNotFound(nodes.DeleteNode(ctx, p.Handle, p.Owner)); err != nil {
		return fmt.Errorf("delete node %s: %w", p.Handle.ExternalID, err)
	}
	return nil
}

// deleteRemovesNICs reports whether a node's DeleteNode removes its NICs itself
// (driver.NICRemover), when detaching them first is wasted work.
func deleteRemovesNICs(nodes driver.Nodes) bool {
	nr, ok := nodes.(driver.NICRemover)
	return ok && nr.DeleteRemovesNICs()
}

// stopBeforeDelete reports whether a node is stopped before it is deleted: unless its driver's
// DeleteNode ends a running node itself (driver.ForceDeleter), when a graceful stop first is
// wasted work.
func stopBeforeDelete(nodes driver.Nodes) bool {
	fd, ok := nodes.(driver.ForceDeleter)
	return !ok || !fd.DeleteStopsNode()
}

// createPart makes op's new object (create, replace's second half, update, read) or resets.
// Except for reset, which saves synchronously, the operation is finished (Done) by the state
// save that includes its result.
func (r *run) createPart(ctx context.Context, op *OpState) error {
	if op.started.IsZero() {
		op.started = time.Now()
	}
	if op.Step == StepBegin {
		if err := r.ck(op, StepBegin); err != nil {
			return err
		}
		r.event(Event{Addr: op.Addr, Op: op.Op, Phase: "start"})
	}
	var err error
	switch op.Action.Kind {
	case specs.KindArtifact:
		err = r.createArtifact(ctx, op)
	case specs.KindNetwork:
		err = r.createNetwork(ctx, op)
	case specs.KindNode:
		if op.Op == plans.Reset {
			err = r.resetNode(ctx, op)
		} else if op.Op == plans.Update {
			err = fmt.Errorf("nodes have no in-place update; plan a replace")
		} else {
			err = r.createNode(ctx, op)
		}
	case specs.KindPolicy:
		err = r.createPolicy(ctx, op)
	default:
		err = fmt.Errorf("unknown kind %q", op.Action.Kind)
	}
	if err != nil {
		if r.fatalErr() != nil {
			return err
		}
		return r.fail(ctx, op, err)
	}
	if op.Op == plans.Reset {
		r.finish(op)
	}
	return nil
}

func (r *run) createArtifact(ctx context.Context, op *OpState) error {
	a := &op.Action
	arts, err := driver.Get[driver.Artifacts](r.e.Registry, a.Driver, driver.CapArtifact)
	if err != nil {
		return err
	}
	spec := *a.Artifact
	spec.Owner = op.Owner
	id, err := arts.ResolveArtifact(ctx, spec)
	if err != nil {
		return fmt.Errorf("resolve artifact %s: %w", spec.Source, err)
	}
	op.Artifact = &id
	// The driver's reference to the loaded artifact (an image id) is its external identity.
	op.Handle = &substrate.Handle{Driver: a.Driver, ExternalID: id.Ref}
	return r.save(ctx, op, substrate.Observation{Status: substrate.Present})
}

func (r *run) createNetwork(ctx context.Context, op *OpState) error {
	a := &op.Action
	nets, err := driver.Get[driver.Networks](r.e.Registry, a.Driver, driver.CapManagedNetwork)
	if err != nil {
		return err
	}
	if op.Handle != nil {
		obs, err := nets.ObserveNetwork(ctx, *op.Handle, op.Owner)
		switch {
		case err != nil || obs.Status == substrate.Unknown:
			return unknownErr("network "+op.Handle.ExternalID, obs, err)
		case obs.Status == substrate.Absent:
			op.Handle = nil
		case !ours(obs, op.Owner):
			return fmt.Errorf("network %s: %w: %w: %s", op.Handle.ExternalID, ErrInvalidObservation, driver.ErrNotOwned, obs.Reason)
		}
	}
	if op.Handle == nil {
		spec := *a.Network
		spec.Owner = op.Owner
		h, err := nets.CreateNetwork(ctx, spec)
		if err != nil {
			return fmt.Errorf("create network: %w", err)
		}
		op.Handle = &h
		if err := r.ck(op, StepCreated); err != nil {
			return err
		}
	}
	obs, err := nets.ObserveNetwork(ctx, *op.Handle, op.Owner)
	if err != nil || obs.Status == substrate.Unknown {
		return unknownErr("network "+op.Handle.ExternalID, obs, err)
	}
	if obs.Status != substrate.Present {
		return fmt.Errorf("network %s: observed %s after create: %s", op.Handle.ExternalID, obs.Status, obs.Reason)
	}
	return r.save(ctx, op, obs)
}

// nodeSpec returns the provider spec for op's node, with plaintext environment when withEnv.
func (r *run) nodeSpec(ctx context.Context, op *OpState, withEnv bool) (substrate.NodeSpec, error) {
	spec := op.Action.Node.Spec
	spec.Owner = op.Owner
	spec.Driver = op.Action.Driver
	fill := func(id *substrate.ArtifactIdentity, from *addrs.Instance) *substrate.ArtifactIdentity {
		if id == nil || from == nil {
			return id
		}
		c := *id
		r.sv.view(func(st *states.State) {
			if ar := st.Resource(*from); ar != nil && ar.ExternalID != "" {
				c.Ref = ar.ExternalID
			}
		})
		return &c
	}
	spec.Artifact = fill(spec.Artifact, op.Action.Node.ArtifactFrom)
	spec.Kernel = fill(spec.Kernel, op.Action.Node.KernelFrom)
	if withEnv {
		env, err := r.resolveEnv(ctx, op.Action.Node.Environment)
		if err != nil {
			return spec, err
		}
		spec.Environment = env
	}
	return spec, nil
}

// networkHandle looks up an attachment's network in the working state.
func (r *run) networkHandle(at specs.Attachment) (substrate.Handle, error) {
	var h substrate.Handle
	var ok bool
	r.sv.view(func(st *states.State) {
		if n := st.Resource(at.Network); n != nil {
			h, ok = handleOf(n), true
		}
	})
	if !ok {
		return h, fmt.Errorf("attachment %s: network %s is not in state", at.Name, at.Network)
	}
	return h, nil
}

// wireNode attaches every desired attachment not yet recorded, configures the guest network
// and starts the node, checkpointing after each substep.
func (r *run) wireNode(ctx context.Context, op *OpState, nodes driver.Nodes) error {
	h := *op.Handle
	if len(op.Action.Node.Attachments) > 0 {
		if err := r.wireAttachments(ctx, op, h); err != nil {
			return err
		}
	}
	if !op.Step.atLeast(StepStarted) || r.recovering {
		spec, err := r.nodeSpec(ctx, op, true)
		if err != nil {
			return err
		}
		// Names before the main process starts (it sees its hosts file from the start), and
		// again after: a runtime may rebuild the file when it starts the node (Docker).
		if err := r.setHosts(ctx, op, h); err != nil {
			return err
		}
		if err := nodes.StartNode(ctx, h, spec); err != nil {
			return fmt.Errorf("start node %s: %w", h.ExternalID, err)
		}
		if err := r.setHosts(ctx, op, h); err != nil {
			return err
		}
		if !op.Step.atLeast(StepStarted) {
			if err := r.ck(op, StepStarted); err != nil {
				return err
			}
		}
	}
	return nil
}

// wireAttachments attaches the node's missing NICs (after recovery, those the checkpoint
// recorded but the driver no longer observes) and configures the guest network.
func (r *run) wireAttachments(ctx context.Context, op *OpState, h substrate.Handle) error {
	a := &op.Action
	nics, err := driver.Get[driver.NICs](r.e.Registry, a.Driver, driver.CapNIC)
	if err != nil {
		return err
	}
	if r.recovering && !op.Step.atLeast(StepStateSaved) {
		if err := r.keepObservedAttachments(ctx, op, h, nics); err != nil {
			return err
		}
	}
	have := map[string]int{}
	for i, at := range op.Attachments {
		have[at.Name] = i
	}
	reattached := false
	for _, want := range a.Node.Attachments {
		if _, ok := have[want.Name]; ok {
			continue
		}
		reattached = reattached || op.Step.atLeast(StepWired)
		nh, err := r.networkHandle(want)
		if err != nil {
			return err
		}
		st, err := nics.Attach(ctx, h, substrate.AttachmentSpec{Owner: op.Owner, Node: op.Addr, Name: want.Name,
			Network: nh, IPv4: want.IPv4, MAC: want.MAC, Gateway: want.Gateway, Aliases: want.Aliases, MTU: want.MTU})
		if err != nil {
			return fmt.Errorf("attach %s: %w", want.Name, err)
		}
		op.Attachments = append(op.Attachments, st)
		if err := r.ck(op, StepAttached); err != nil {
			return err
		}
	}
	// A NIC attached again (recovery found it lost) comes without the guest's addresses,
	// gateway and routes: configure the guest network again, whatever step the checkpoint
	// had reached (ConfigureGuestNetwork is idempotent). The attach checkpoint above
	// records step "attached", so a crash before this configuration redoes it too.
	if reattached || !op.Step.atLeast(StepWired) {
		if err := nics.ConfigureGuestNetwork(ctx, h, op.Attachments, a.Node.Routes); err != nil {
			return fmt.Errorf("configure guest network: %w", err)
		}
		if err := r.ck(op, StepWired); err != nil {
			return err
		}
	}
	return nil
}

// keepObservedAttachments re-observes what the checkpoint says was wired and keeps only the
// attachments still present.
func (r *run) keepObservedAttachments(ctx context.Context, op *OpState, h substrate.Handle, nics driver.NICs) error {
	kept := op.Attachments[:0]
	for _, at := range op.Attachments {
		obs, err := nics.ObserveAttachment(ctx, h, at, op.Owner)
		if err != nil || obs.Status == substrate.Unknown {
			return unknownErr("attachment "+at.Name, obs, err)
		}
		if obs.Status != substrate.Absent {
			kept = append(kept, at)
		}
	}
	op.Attachments = kept
	return nil
}

// observeNew requires op's new node to be observed present.
func (r *run) observeNew(ctx context.Context, op *OpState, nodes driver.Nodes) (substrate.Observation, error) {
	obs, err := nodes.ObserveNode(ctx, *op.Handle, op.Owner)
	if err != nil || obs.Status == substrate.Unknown {
		return obs, unknownErr("node "+op.Handle.ExternalID, obs, err)
	}
	if obs.Status != substrate.Present {
		return obs, fmt.Errorf("node %s: observed %s after start: %s", op.Handle.ExternalID, obs.Status, obs.Reason)
	}
	return obs, nil
}

// adoptRecorded re-observes a handle a checkpoint recorded: Absent drops it (the object must be
// made again), Unknown stops, markers that are not op's stop.
func (r *run) adoptRecorded(ctx context.Context, op *OpState, nodes driver.Nodes) error {
	if op.Handle == nil || !r.recovering {
		return nil
	}
	obs, err := nodes.ObserveNode(ctx, *op.Handle, op.Owner)
	switch {
	case err != nil || obs.Status == substrate.Unknown:
		return unknownErr("node "+op.Handle.ExternalID, obs, err)
	case obs.Status == substrate.Absent:
		op.Handle, op.Attachments = nil, nil
		op.Step = StepBegin
	case !ours(obs, op.Owner):
		return fmt.Errorf("node %s: %w: %w: %s", op.Handle.ExternalID, ErrInvalidObservation, driver.ErrNotOwned, obs.Reason)
	}
	return nil
}

func (r *run) createNode(ctx context.Context, op *OpState) error {
	a := &op.Action
	nodes, err := driver.Get[driver.Nodes](r.e.Registry, a.Driver, driver.CapNodeLifecycle)
	if err != nil {
		return err
	}
	interrupted := provisionInterrupted(op) // before re-wiring can rewrite the step
	if err := r.adoptRecorded(ctx, op, nodes); err != nil {
		return err
	}
	if op.Handle == nil {
		interrupted = false // a new object: its provisioners never ran
		spec, err := r.nodeSpec(ctx, op, true)
		if err != nil {
			return err
		}
		h, err := nodes.CreateNode(ctx, spec)
		if err != nil {
			return fmt.Errorf("create node: %w", err)
		}
		op.Handle = &h
		if err := r.ck(op, StepCreated); err != nil {
			return err
		}
	}
	if err := r.wireNode(ctx, op, nodes); err != nil {
		return r.keepFailed(ctx, op, err)
	}
	obs, err := r.observeNew(ctx, op, nodes)
	if err != nil {
		return r.keepFailed(ctx, op, err)
	}
	if err := r.provision(ctx, op, interrupted); err != nil {
		return r.keepFailed(ctx, op, err)
	}
	return r.save(ctx, op, obs)
}

// keepFailed records a node that exists but failed to come up in state as degraded, so that
// nothing created is forgotten (the next plan replaces it). Unknown observations are not
// recorded: recovery must look again.
func (r *run) keepFailed(ctx context.Context, op *OpState, cause error) error {
	if stops(ctx, cause) || op.Handle == nil || r.fatalErr() != nil {
		return cause
	}
	if err := r.saveSync(ctx, op, substrate.Observation{Status: substrate.Degraded, Reason: cause.Error()}); err != nil {
		return errors.Join(cause, err)
	}
	return cause
}

func (r *run) createPolicy(ctx context.Context, op *OpState) error {
	a := &op.Action
	pol, err := driver.Get[driver.Policy](r.e.Registry, a.Driver, driver.CapPolicy)
	if err != nil {
		return err
	}
	var node *states.Resource
	r.sv.view(func(st *states.State) {
		if n := st.Resource(a.Policy.Node); n != nil {
			node = n.Clone()
		}
	})
	if node == nil {
		return fmt.Errorf("node %s is not in state", a.Policy.Node)
	}
	nh := handleOf(node)
	spec := a.Policy.Spec
	spec.Owner = op.Owner
	if op.Handle != nil && r.recovering {
		obs, err := pol.ObservePolicy(ctx, nh, *op.Handle, node.Attachments, spec)
		if err != nil || obs.Status == substrate.Unknown {
			return unknownErr("policy "+op.Handle.ExternalID, obs, err)
		}
		if obs.Status != substrate.Present {
			op.Handle = nil // absent or drifted: install again (atomic replace)
		}
	}
	if op.Handle == nil {
		h, err := pol.ApplyPolicy(ctx, nh, node.Attachments, spec)
		if err != nil {
			return fmt.Errorf("apply policy on %s: %w", nh.ExternalID, err)
		}
		op.Handle = &h
		if err := r.ck(op, StepApplied); err != nil {
			return err
		}
	}
	obs, err := pol.ObservePolicy(ctx, nh, *op.Handle, node.Attachments, spec)
	if err != nil || obs.Status == substrate.Unknown {
		return unknownErr("policy "+op.Handle.ExternalID, obs, err)
	}
	if obs.Status != substrate.Present {
		return fmt.Errorf("policy %s: observed %s after apply: %s", op.Handle.ExternalID, obs.Status, obs.Reason)
	}
	return r.save(ctx, op, obs)
}
