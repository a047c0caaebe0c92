package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// DestroyActions plans the deletion of everything in st, each with the kind res gives its type
// and its recorded dependencies. The planner's destroy plan (which also enforces
// prevent_destroy) is preferred when there is a configuration.
func DestroyActions(st *states.State, res Resources) ([]Action, error) {
	if res == nil {
		return nil, errors.New("destroy: no resource registry to tell the kinds of resources in state")
	}
	var out []Action
	for _, r := range st.Resources {
		k, ok := res.Kind(r.Addr.Resource.Type)
		if !ok {
			return nil, fmt.Errorf("destroy %s: no kind known for resource type %s", r.Addr, r.Addr.Resource.Type)
		}
		out = append(out, Action{Addr: r.Addr, Op: plans.Delete, Reason: "destroy", Kind: k, Driver: r.Driver, Deps: r.Dependencies})
	}
	return out, nil
}

// ResidueError lists topology-owned objects an audit found.
type ResidueError struct {
	Topology string
	Objects  []substrate.Object
}

func (e *ResidueError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "residue audit: %d object(s) still carry topology %s's ownership markers:", len(e.Objects), e.Topology)
	for _, o := range e.Objects {
		fmt.Fprintf(&b, "\n  %s %s (%s generation %d)", o.Kind, o.ExternalID, o.Owner.Address, o.Owner.Generation)
	}
	return b.String()
}

// Destroy deletes every resource (plan nil: everything in state, see DestroyActions) in reverse
// dependency order, then audits every driver that can for objects still carrying the
// topology's markers (S16). Destroy is done only when state is empty and the audit is clean;
// otherwise the error is a *ResidueError or the operations' failures.
func (e *Executor) Destroy(ctx context.Context, plan *Request) (*Result, []substrate.Object, error) {
	s, rep, err := e.open(ctx, "destroy")
	if err != nil {
		return &Result{Recovered: rep}, nil, err
	}
	defer s.close()
	var actions []Action
	if plan == nil {
		acts, err := DestroyActions(s.st, e.Resources)
		if err != nil {
			return &Result{Recovered: rep}, nil, err
		}
		plan, actions = &Request{}, acts
	} else if actions, err = plan.prepare(ctx, s.st); err != nil {
		return &Result{Recovered: rep}, nil, err
	}
	if err := e.Check(actions); err != nil {
		return &Result{Recovered: rep}, nil, err
	}
	lineage := s.st.Lineage
	// The topology's drivers: those in state, in the run, and in its configuration. Only
	// these are audited; a driver the topology never used is not consulted (dockerd being
	// down says nothing about a netns-only lab).
	used := map[string]bool{} // true: named in state or the run
	for _, r := range s.st.Resources {
		if r.Driver != "" {
			used[r.Driver] = true
		}
	}
	for _, a := range actions {
		if a.Driver != "" {
			used[a.Driver] = true
		}
	}
	for _, d := range plan.Drivers {
		if _, ok := used[d]; !ok && d != "" {
			used[d] = false // configured only
		}
	}
	res, runErr := e.execute(ctx, s, "destroy", plan.Fingerprint, actions, func(*states.State) (map[string]states.Output, error) {
		return map[string]states.Output{}, nil
	})
	res.Recovered = rep
	if runErr != nil {
		return res, nil, runErr
	}
	residue, audited, skipped, err := e.Audit(ctx, lineage, used)
	res.Audited, res.AuditSkipped = audited, skipped
	if err != nil {
		return res, nil, err
	}
	if len(residue) > 0 {
		return res, residue, &ResidueError{Topology: lineage, Objects: residue}
	}
	return res, nil, nil
}

// Audit asks the drivers the topology uses that have the audit capability for objects carrying
// the topology's markers, and returns the residue and the drivers it consulted. used maps each
// of the topology's drivers to true when state or the run named it, false when only its
// configuration does. No other registered driver is asked.
//
// A used driver that cannot answer (unavailable) is an error: ownership evidence is incomplete,
// so destroy cannot be called done — unknown is never absent. A driver this sysbox does not
// provide is an error too when state or the run named it; one only the configuration names
// (declared, nothing made with it) is listed in skipped.
func (e *Executor) Audit(ctx context.Context, topology string, used map[string]bool) (out []substrate.Object, audited, skipped []string, err error) {
	names := make([]string, 0, len(used))
	for name := range used {
		names = append(names, name)
	}
	sort.Strings(names)
	seen := map[string]bool{}
	for _, name := range names {
		if _, derr := e.Registry.Driver(name); derr != nil {
			if used[name] {
				return nil, audited, skipped, fmt.Errorf("residue audit: driver %s: %w", name, derr)
			}
			skipped = append(skipped, name)
			continue
		}
		if !e.Registry.Has(name, driver.CapAudit) {
			continue
		}
		a, err := driver.Get[driver.Auditor](e.Registry, name, driver.CapAudit)
		if err != nil {
			return nil, audited, skipped, err
		}
		objs, err := a.Residue(ctx, topology)
		if err != nil {
			return nil, audited, skipped, fmt.Errorf("residue audit: driver %s: %w", name, err)
		}
		audited = append(audited, name)
		for _, o := range objs {
			k := o.Kind + "\x00" + o.ExternalID
			if !seen[k] { // one object may be reported by drivers sharing a substrate
				seen[k] = true
				out = append(out, o)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Owner.Address != out[j].Owner.Address {
			return out[i].Owner.Address < out[j].Owner.Address
		}
		return out[i].ExternalID < out[j].ExternalID
	})
	return out, audited, skipped, nil
}

// Refresh observes every resource in state through its driver and saves the observations by
// CAS. desired (from the configuration, may be nil) supplies the policy specs whose digests are
// compared. A driver that cannot observe yields Unknown — never Absent — and Refresh reports it.
// A node whose attachment is missing is Degraded (drift that a plan converges by replacement).
func (e *Executor) Refresh(ctx context.Context, desired []Action) (map[string]substrate.Status, error) {
	s, _, err := e.open(ctx, "refresh")
	if err != nil {
		return nil, err
	}
	defer s.close()
	want := map[string]*Action{}
	for i := range desired {
		want[desired[i].Addr.String()] = &desired[i]
	}
	type result struct {
		addr addrs.Instance
		obs  states.Observation
		err  error
	}
	results := make([]result, len(s.st.Resources))
	sem := make(chan struct{}, e.parallelism())
	done := make(chan struct{})
	for i, r := range s.st.Resources {
		go func(i int, r *states.Resource) {
			sem <- struct{}{}
			defer func() { <-sem; done <- struct{}{} }()
			obs, err := e.observe(ctx, s.st, r, want[r.Addr.String()])
			results[i] = result{addr: r.Addr, obs: states.Observation{Status: obs.Status, Reason: obs.Reason, At: e.now()}, err: err}
		}(i, r)
	}
	for range s.st.Resources {
		<-done
	}
	out := map[string]substrate.Status{}
	var errs []error
	next := s.st.Clone()
	for _, res := range results {
		out[res.addr.String()] = res.obs.Status
		if res.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", res.addr, res.err))
		}
		if r := next.Resource(res.addr); r != nil {
			r.Observation = res.obs
		}
	}
	if len(results) > 0 {
		next.Serial = s.st.Serial + 1
		next.ToolVersion = states.ToolVersion()
		if err := e.State.Save(ctx, next, s.st.Serial); err != nil {
			return out, fmt.Errorf("save refreshed state: %w", err)
		}
	}
	return out, errors.Join(errs...)
}

// observe looks at one resource. The error is set only for an Unknown observation.
func (e *Executor) observe(ctx context.Context, st *states.State, r *states.Resource, want *Action) (substrate.Observation, error) {
	kind := e.kindOf(r.Addr)
	if want != nil {
		kind = want.Kind
	}
	h := handleOf(r)
	unknown := func(err error) (substrate.Observation, error) {
		return substrate.Observation{Status: substrate.Unknown, Reason: err.Error()}, err
	}
	switch kind {
	case specs.KindArtifact:
		if want == nil || want.Artifact == nil || r.Driver == "" {
			return substrate.Observation{Status: r.Observation.Status, Reason: r.Observation.Reason}, nil
		}
		return substrate.Observation{Status: substrate.Present}, nil
	case specs.KindNetwork:
		nets, err := driver.Get[driver.Networks](e.Registry, r.Driver, driver.CapManagedNetwork)
		if err != nil {
			return unknown(err)
		}
		obs, err := nets.ObserveNetwork(ctx, h, r.Owner)
		if err != nil || obs.Status == substrate.Unknown {
			return unknown(fmt.Errorf("%w: %v %s", ErrUnknownObservation, err, obs.Reason))
		}
		return obs, nil
	case specs.KindNode:
		nodes, err := driver.Get[driver.Nodes](e.Registry, r.Driver, driver.CapNodeLifecycle)
		if err != nil {
			return unknown(err)
		}
		obs, err := nodes.ObserveNode(ctx, h, r.Owner)
		if err != nil || obs.Status == substrate.Unknown {
			return unknown(fmt.Errorf("%w: %v %s", ErrUnknownObservation, err, obs.Reason))
		}
		if obs.Status != substrate.Present || len(r.Attachments) == 0 {
			return obs, nil
		}
		nics, err := driver.Get[driver.NICs](e.Registry, r.Driver, driver.CapNIC)
		if err != nil {
			return unknown(err)
		}
		for _, at := range r.Attachments {
			ao, err := nics.ObserveAttachment(ctx, h, at, r.Owner)
			if err != nil || ao.Status == substrate.Unknown {
				return unknown(fmt.Errorf("attachment %s: %w: %v %s", at.Name, ErrUnknownObservation, err, ao.Reason))
			}
			if ao.Status != substrate.Present {
				obs.Status = substrate.Degraded
				obs.Reason = fmt.Sprintf("attachment %s is %s: %s", at.Name, ao.Status, ao.Reason)
				return obs, nil
			}
		}
		return obs, nil
	case specs.KindPolicy:
		node := st.Resource(e.policyNode(want, r))
		if node == nil {
			return substrate.Observation{Status: substrate.Absent, Reason: "its node is not in state"}, nil
		}
		if want == nil || want.Policy == nil {
			return substrate.Observation{Status: r.Observation.Status, Reason: "not compared: no desired policy given"}, nil
		}
		pol, err := driver.Get[driver.Policy](e.Registry, r.Driver, driver.CapPolicy)
		if err != nil {
			return unknown(err)
		}
		spec := want.Policy.Spec
		spec.Owner = r.Owner
		obs, err := pol.ObservePolicy(ctx, handleOf(node), h, node.Attachments, spec)
		if err != nil || obs.Status == substrate.Unknown {
			return unknown(fmt.Errorf("%w: %v %s", ErrUnknownObservation, err, obs.Reason))
		}
		return obs, nil
	}
	return unknown(fmt.Errorf("no kind known for resource type %s", r.Addr.Resource.Type))
}

// Import adopts an existing node as the desired node action (address, driver, and the
// handler's stored form, schema version and dependencies, so that the next plan compares like
// with like and destroy orders it correctly) through its driver's import rule (S22), and records
// it in state at generation 1 of this topology's ownership.
func (e *Executor) Import(ctx context.Context, desired Action, externalID string) (*states.Resource, error) {
	addr, driverName := desired.Addr, desired.Driver
	s, _, err := e.open(ctx, "import")
	if err != nil {
		return nil, err
	}
	defer s.close()
	if s.st.Resource(addr) != nil {
		return nil, fmt.Errorf("import %s: %w", addr, &states.ExistsError{Addr: addr})
	}
	if s.st.Serial == 0 {
		next := s.st.Clone()
		next.Serial = 1
		if err := e.State.Save(ctx, next, 0); err != nil {
			return nil, err
		}
		s.st = next
	}
	owner := substrate.Owner{Topology: s.st.Lineage, Address: addr.String(), Type: addr.Resource.Type, Generation: 1}
	if desired.Kind != specs.KindNode {
		res, err := e.importObject(ctx, s.st, desired, externalID, owner)
		if err == nil {
			err = e.saveImported(ctx, s, res)
		}
		if err != nil {
			return nil, err
		}
		return res, nil
	}
	imp, err := driver.Get[driver.Importer](e.Registry, driverName, driver.CapImport)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", addr, err)
	}
	got, err := imp.ImportNode(ctx, externalID, owner)
	if err != nil {
		return nil, fmt.Errorf("import %s from %s: %w", addr, externalID, err)
	}
	now := e.now()
	priv := got.Handle.Private
	res := &states.Resource{Addr: addr, SchemaVersion: 1, Driver: driverName, ExternalID: got.Handle.ExternalID,
		Attachments: got.Attachments, Owner: owner, Private: &priv, CreatedAt: now, UpdatedAt: now,
		Observation: states.Observation{Status: substrate.Present, Reason: "imported", At: now}}
	res.Attributes, _ = jsonMarshal(summary{Kind: specs.KindNode, Generation: 1, Artifact: got.Artifact})
	if desired.Attributes != nil {
		res.Attributes = desired.Attributes
	}
	if desired.SchemaVersion > 0 {
		res.SchemaVersion = desired.SchemaVersion
	}
	res.Dependencies = desired.Deps
	// What the configuration wires but the object lacks is drift, recorded so that the planner
	// converges it by a controlled replacement (S14).
	if desired.Node != nil {
		have := map[string]bool{}
		for _, a := range got.Attachments {
			have[a.Name] = true
		}
		var missing []string
		for _, a := range desired.Node.Attachments {
			if !have[a.Name] {
				missing = append(missing, a.Name)
			}
		}
		if len(missing) > 0 {
			res.Observation = states.Observation{Status: substrate.Degraded, At: now,
				Reason: "imported without configured attachment(s) " + strings.Join(missing, ", ")}
		}
	}
	if err := e.saveImported(ctx, s, res); err != nil {
		return nil, err
	}
	return res, nil
}

// saveImported records res in state (one CAS save).
func (e *Executor) saveImported(ctx context.Context, s *session, res *states.Resource) error {
	next := s.st.Clone()
	next.Set(res)
	next.Serial = s.st.Serial + 1
	next.ToolVersion = states.ToolVersion()
	if err := e.State.Save(ctx, next, s.st.Serial); err != nil {
		return fmt.Errorf("import %s: save state: %w", res.Addr, err)
	}
	return nil
}

// Exec runs argv inside the node at addr through its driver's guest execution capability.
// It takes no state lock: it reads state and mutates nothing sysbox tracks.
func (e *Executor) Exec(ctx context.Context, addr addrs.Instance, req substrate.ExecRequest) (substrate.ExecResult, error) {
	st, err := e.State.Read(ctx)
	if err != nil {
		return substrate.ExecResult{}, fmt.Errorf("read state: %w", err)
	}
	if st == nil || st.Resource(addr) == nil {
		return substrate.ExecResult{}, fmt.Errorf("exec %s: %w", addr, &states.NotFoundError{Addr: addr})
	}
	r := st.Resource(addr)
	if r.Observation.Status == substrate.Absent {
		return substrate.ExecResult{}, fmt.Errorf("exec %s: node is absent (last observation)", addr)
	}
	g, err := driver.Get[driver.GuestExec](e.Registry, r.Driver, driver.CapGuestExec)
	if err != nil {
		return substrate.ExecResult{}, fmt.Errorf("exec %s: %w", addr, err)
	}
	res, err := g.Exec(ctx, handleOf(r), req)
	if err != nil {
		return res, fmt.Errorf("exec %s: %w", addr, err)
	}
	return res, nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
