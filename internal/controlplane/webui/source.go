package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/internal/ui"
	"zyvor.dev/sysbox/pkg/substrate"
)

// maxLines bounds the progress lines a graph carries (the latest ones).
const maxLines = 200

// source is a workspace of the control plane as a ui.Source.
type source struct {
	st                 *store.Store
	project, workspace string

	mu   sync.Mutex
	plan string      // id of the cached plan
	p    *plans.Plan // plans are immutable: decoded once
}

var _ ui.Source = (*source)(nil)

// Graph joins the plan of the workspace's latest run (what is desired) with its projections
// (what agents last reported) and that run's progress.
func (s *source) Graph(ctx context.Context) (*ui.Graph, error) {
	where := fmt.Sprintf("workspace %s", s.workspace)
	p, err := s.st.Project(ctx, s.project)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	ws, err := s.st.Workspace(ctx, s.project, s.workspace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	runs, err := s.st.Runs(ctx, s.project, s.workspace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	projs, err := s.st.Projections(ctx, s.project, s.workspace)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	var plan *plans.Plan
	if change := latestChange(runs); change != nil {
		if plan, err = s.planOf(ctx, change.Plan); err != nil {
			return nil, fmt.Errorf("%s: run %s: %w", where, change.ID, err)
		}
	}
	// The panel beside the graph follows the latest run of any kind (a refresh or another
	// remote command too); only the desired state comes from the latest change's plan.
	var run *store.Run
	if len(runs) > 0 {
		run = &runs[len(runs)-1]
	}
	top, attrs, err := desired(plan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	rec, err := recorded(projs, attrs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	g := ui.Build(top, rec)
	g.Title = p.Name + " / " + ws.Name
	g.Version = version(run, projs)
	if run != nil {
		if g.Run, err = s.progress(ctx, *run); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
	}
	return g, nil
}

// latestChange is the latest run that changes the lab (apply, destroy, reset) with a stored
// plan: runs of other kinds (a remote command reading state) say nothing of what is desired.
func latestChange(runs []store.Run) *store.Run {
	for i := len(runs) - 1; i >= 0; i-- {
		switch runs[i].Op {
		case "apply", "destroy", "reset":
			if runs[i].Plan != "" {
				return &runs[i]
			}
		}
	}
	return nil
}

func (s *source) planOf(ctx context.Context, id string) (*plans.Plan, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.plan == id {
		return s.p, nil
	}
	_, data, err := s.st.PlanData(ctx, s.project, id)
	if err != nil {
		return nil, err
	}
	p, err := plans.Decode(data)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", id, err)
	}
	s.plan, s.p = id, p
	return p, nil
}

// desired is the configuration a plan was made from, as far as the graph needs it: every
// instance it keeps (not deleted) with its stored form, which is the configuration the
// handlers decoded. attrs are the stored attributes of every planned address (after, or
// before for a deletion).
func desired(p *plans.Plan) (*config.Topology, map[string]plannedAttrs, error) {
	attrs := map[string]plannedAttrs{}
	if p == nil {
		return nil, attrs, nil
	}
	top := &config.Topology{}
	for _, a := range p.Actions {
		k := a.Address.String()
		if a.Action == plans.Delete {
			attrs[k] = plannedAttrs{driver: a.Driver, attrs: a.Before}
			continue
		}
		attrs[k] = plannedAttrs{driver: a.Driver, attrs: a.After}
		c, err := storedConfig(a.Type, a.After)
		if err != nil {
			return nil, nil, fmt.Errorf("plan action %s: %w", k, err)
		}
		top.Resources = append(top.Resources, &config.ResourceInstance{Addr: a.Address, Config: c, DependsOn: a.DependsOn})
	}
	return top, attrs, nil
}

type plannedAttrs struct {
	driver string
	attrs  json.RawMessage
}

// storedConfig decodes the stored form of the types the graph draws specially (their stored
// form is the configuration the handlers decoded); other types need none.
func storedConfig(typ string, after json.RawMessage) (any, error) {
	switch typ {
	case "sysbox_node":
		return decodeAs[handlers.NodeConfig](typ, after)
	case "sysbox_network":
		return decodeAs[handlers.NetworkConfig](typ, after)
	case "sysbox_firewall":
		return decodeAs[handlers.FirewallConfig](typ, after)
	case "sysbox_router":
		return decodeAs[handlers.RouterConfig](typ, after)
	}
	return nil, nil
}

func decodeAs[T any](typ string, b json.RawMessage) (any, error) {
	var c T
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("stored %s: %w", typ, err)
	}
	return c, nil
}

// recorded is the state the projections describe. Attributes and driver come from the plan
// (the control plane keeps no state file); the observation time is when the projection was
// stored.
func recorded(projs []store.Projection, attrs map[string]plannedAttrs) (*states.State, error) {
	st := &states.State{} // no lineage: it would change every poll
	for _, pr := range projs {
		a, err := addrs.ParseInstance(pr.Address)
		if err != nil {
			return nil, fmt.Errorf("projection %q: %w", pr.Address, err)
		}
		r := &states.Resource{Addr: a, ExternalID: pr.ExternalID,
			Observation: states.Observation{Status: substrate.Status(pr.Observation), At: pr.Updated}}
		r.Owner.Generation = uint64(pr.Generation)
		if pa, ok := attrs[pr.Address]; ok {
			r.Driver, r.Attributes = pa.driver, pa.attrs
		}
		st.Set(r)
	}
	return st, nil
}

// version names the stored data a graph is built from: the latest run, its next event
// sequence number and status, and the projections' count and last change.
func version(run *store.Run, projs []store.Projection) string {
	var last int64
	for _, p := range projs {
		if ns := p.Updated.UnixNano(); ns > last {
			last = ns
		}
	}
	r := "none.0.none"
	if run != nil {
		r = fmt.Sprintf("%s.%d.%s", run.ID, run.NextSeq, run.Status)
	}
	return fmt.Sprintf("%s.p%d.%d", r, len(projs), last)
}

// progress is the run with its last progress lines and checkpoint records (its last maxLines
// events): those before run.NextSeq as read, so that the graph is what its version says even
// if events were appended since.
func (s *source) progress(ctx context.Context, run store.Run) (*ui.Run, error) {
	after := max(run.NextSeq-1-maxLines, 0)
	evs, err := s.st.Events(ctx, s.project, run.ID, after, int(run.NextSeq-1-after))
	if err != nil {
		return nil, err
	}
	out := &ui.Run{ID: run.ID, Op: run.Op, Status: run.Status, Result: run.Result, Seq: after + 1, Lines: []string{}}
	for _, e := range evs {
		switch e.Kind {
		case "progress":
			out.Lines = append(out.Lines, e.Data)
		case ui.EventCheckpoint:
			var c ui.Checkpoint
			if err := json.Unmarshal([]byte(e.Data), &c); err != nil {
				return nil, fmt.Errorf("run %s: event %d: checkpoint: %w", run.ID, e.Seq, err)
			}
			out.Checkpoints = append(out.Checkpoints, c)
		}
	}
	return out, nil
}
