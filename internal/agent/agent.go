// Package agent is the host agent's loop (S19): heartbeat with its capabilities, claim a run
// its capabilities cover, renew the lease at a third of its TTL, hand the run to a Runner (the
// CLI wires in its own runtime, so an agent runs exactly what `sysbox apply` runs), stream the
// runner's progress lines as the run's events, and record the outcome. Every request goes
// through internal/controlplane/client, signed.
//
// Invariants: a run is executed only while its lease is held; when a renewal or an event
// write is refused as fenced (another holder claimed the run) the runner's context is
// cancelled and nothing more is written under the old epoch. The state lock the runner takes
// stays a second, separate protection.
package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/client"
	"zyvor.dev/sysbox/internal/controlplane/wire"
)

// Job is one claimed run handed to a Runner.
type Job struct {
	Lease    *client.Lease
	Plan     []byte    // the stored plan file (none for a command run)
	Bundle   []byte    // the revision (topology bundle) the run works on
	Progress io.Writer // each line becomes a "progress" event of the run (the command's stdout)
	Errors   io.Writer // each line becomes a "stderr" event (the command's stderr)
	// Emit appends one event of another kind (e.g. "checkpoint") to the run's log, after
	// the complete lines written before it.
	Emit func(kind, data string) error
	// Project queues projections to store under the lease while the run goes on (in the
	// background, after the events written before them; it returns at once); PlanOutput
	// stores the plan file a plan run made. A fenced refusal of either cancels the run.
	Project    func(ps ...client.Projection) error
	PlanOutput func(plan []byte) error
}

// Outcome is what a runner reports: a one-line result, the command's exit code, and the
// workspace's resources as they stand afterwards (sent as the workspace's projections, also
// after a failure).
type Outcome struct {
	Result      string
	ExitCode    int
	Projections []client.Projection
}

// Runner executes a job.
type Runner func(ctx context.Context, j Job) (Outcome, error)

// Agent is a running agent.
type Agent struct {
	Client *client.Agent
	Run    Runner
	Caps   []string
	Log    *slog.Logger
	// Poll is the longest one claim waits on the server for a run (a long poll: a run queued
	// meanwhile is claimed at once), so also the heartbeat period when idle, and the pause
	// after a failed claim; RenewEvery the renewal period (0: a third of the lease's TTL as the
	// server granted it).
	Poll, RenewEvery time.Duration
}

// Serve heartbeats and executes runs until ctx ends.
func (a *Agent) Serve(ctx context.Context) error {
	for ctx.Err() == nil {
		if err := a.Client.Heartbeat(ctx, a.Caps); err != nil && ctx.Err() == nil {
			a.Log.Warn("heartbeat failed", "err", err)
		}
		l, err := a.Client.ClaimWait(ctx, min(a.Poll, wire.MaxWait))
		if l != nil {
			a.execute(ctx, l)
			continue
		}
		if err == nil {
			continue // the server waited for us
		}
		if ctx.Err() == nil {
			a.Log.Warn("claim failed", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(a.Poll):
		}
	}
	return nil
}

// execute runs one lease to its end (or to its loss).
func (a *Agent) execute(ctx context.Context, l *client.Lease) {
	log := a.Log.With("run", l.Run.ID, "epoch", l.Epoch)
	log.Info("run claimed", "op", l.Run.Op)
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(a.renewEvery(l))
		defer t.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
				if err := a.Client.Renew(runCtx, l); err != nil {
					if errors.Is(err, client.ErrFenced) {
						cancel(fmt.Errorf("lease lost: %w", err))
						return
					}
					log.Warn("renew failed", "err", err)
				}
			}
		}
	}()
	defer wg.Wait()
	defer cancel(nil)

	if !a.logClaim(runCtx, l, log) {
		return
	}

	var plan, bundle []byte
	var err error
	if l.Run.Plan != "" { // a command run has only a revision
		plan, err = a.Client.Plan(runCtx, l)
	}
	if err == nil {
		bundle, err = a.Client.Revision(runCtx, l)
	}
	if err != nil {
		a.finish(ctx, l, log, Outcome{}, fmt.Errorf("fetch run %s: %w", l.Run.ID, err), runCtx)
		return
	}
	fenced := func(err error) error {
		if errors.Is(err, client.ErrFenced) {
			cancel(fmt.Errorf("lease lost: %w", err))
		}
		return err
	}
	snd := newSender(runCtx, a.Client, l, fenced)
	pw := &progress{snd: snd, kind: "progress"}
	ew := &progress{snd: snd, kind: "stderr"}
	job := Job{Lease: l, Plan: plan, Bundle: bundle, Progress: pw, Errors: ew,
		Emit: func(kind, data string) error { return snd.add(client.Event{Kind: kind, Data: data}) },
		// Projections queue behind the events written before them (a reader never sees a
		// resource projected before its progress line) and never hold the runtime up.
		Project: snd.project,
		PlanOutput: func(b []byte) error {
			if err := snd.drain(); err != nil {
				return err
			}
			_, err := a.Client.PlanOutput(runCtx, l, b)
			return fenced(err)
		}}
	out, err := a.Run(runCtx, job)
	pw.flush()
	ew.flush()
	if len(out.Projections) > 0 {
		snd.project(out.Projections...)
	}
	if serr := snd.drain(); serr != nil && !errors.Is(serr, client.ErrFenced) {
		log.Warn("events or projections refused", "err", serr)
	}
	a.finish(ctx, l, log, out, err, runCtx)
}

// logClaim writes the claim as the run's first event under this epoch, before any work starts
// (the other events go in the background), so that the log shows every attempt, also one whose
// agent died at once. False when the lease is already lost.
func (a *Agent) logClaim(ctx context.Context, l *client.Lease, log *slog.Logger) bool {
	claim := client.Event{Kind: "claim", Data: fmt.Sprintf("claimed by agent %s at lease epoch %d", a.Client.ID, l.Epoch)}
	if _, err := a.Client.Events(ctx, l, claim); errors.Is(err, client.ErrFenced) {
		log.Warn("run abandoned: lease lost", "err", err)
		return false
	} else if err != nil {
		log.Warn("claim event refused", "err", err)
	}
	return true
}

// renewEvery is the renewal period for l: RenewEvery, or a third of the lease's TTL.
func (a *Agent) renewEvery(l *client.Lease) time.Duration {
	if a.RenewEvery > 0 {
		return a.RenewEvery
	}
	if d := time.Duration(l.TTLSeconds * float64(time.Second) / 3); d > 0 {
		return d
	}
	return time.Second // a lease without a TTL: renew often rather than lose it
}

func (a *Agent) finish(ctx context.Context, l *client.Lease, log *slog.Logger, out Outcome, err error, runCtx context.Context) {
	if cause := context.Cause(runCtx); cause != nil && errors.Is(cause, client.ErrFenced) {
		log.Warn("run abandoned: lease lost", "err", cause)
		return
	}
	status, result, code := "succeeded", out.Result, out.ExitCode
	if err != nil {
		status, result = "failed", err.Error()
		if code == 0 {
			code = 1
		}
	}
	if cerr := a.Client.Complete(ctx, l, status, result, code); cerr != nil {
		log.Warn("complete refused", "err", cerr)
		return
	}
	log.Info("run finished", "status", status)
}

// sender appends a run's events and stores its projections in the background, in the order
// they were handed over, in batches of what accumulated while the previous request was on its
// way: the runtime never waits for the control plane. A fenced refusal cancels the run
// (fenced) and drops what is queued.
type sender struct {
	ctx    context.Context
	a      *client.Agent
	l      *client.Lease
	fenced func(error) error
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []outgoing
	busy   bool
	err    error
}

// outgoing is one request's worth: events, or projections.
type outgoing struct {
	events      []client.Event
	projections []client.Projection
}

func newSender(ctx context.Context, a *client.Agent, l *client.Lease, fenced func(error) error) *sender {
	s := &sender{ctx: ctx, a: a, l: l, fenced: fenced}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// maxBatch bounds one request's events.
const maxBatch = 500

// add queues events.
func (s *sender) add(evs ...client.Event) error {
	return s.enqueue(func(last *outgoing) bool {
		if last == nil || last.events == nil {
			return false
		}
		last.events = append(last.events, evs...)
		return true
	}, outgoing{events: evs})
}

// project queues projections; ones queued after the same events are merged (the later
// projection of an address wins).
func (s *sender) project(ps ...client.Projection) error {
	return s.enqueue(func(last *outgoing) bool {
		if last == nil || last.projections == nil {
			return false
		}
		for _, p := range ps {
			i := slices.IndexFunc(last.projections, func(q client.Projection) bool { return q.Address == p.Address })
			if i >= 0 {
				last.projections[i] = p
			} else {
				last.projections = append(last.projections, p)
			}
		}
		return true
	}, outgoing{projections: append([]client.Projection{}, ps...)})
}

// enqueue merges into the last queued request (merge) or queues o, and starts a sender
// goroutine unless one runs.
func (s *sender) enqueue(merge func(last *outgoing) bool, o outgoing) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	var last *outgoing
	if n := len(s.queue); n > 0 {
		last = &s.queue[n-1]
	}
	if !merge(last) {
		s.queue = append(s.queue, o)
	}
	if !s.busy {
		s.busy = true
		go s.run()
	}
	return nil
}

func (s *sender) run() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && s.err == nil {
		o := s.queue[0]
		if len(o.events) > maxBatch {
			s.queue[0].events = o.events[maxBatch:]
			o.events = o.events[:maxBatch]
		} else {
			s.queue = s.queue[1:]
		}
		s.mu.Unlock()
		var err error
		if o.events != nil {
			_, err = s.a.Events(s.ctx, s.l, o.events...)
		} else {
			err = s.a.Projections(s.ctx, s.l, o.projections...)
		}
		s.mu.Lock()
		if err != nil {
			s.err = s.fenced(err)
			s.queue = nil
		}
	}
	s.busy = false
	s.cond.Broadcast()
}

// drain waits until every queued event was sent (or refused) and returns the first error.
func (s *sender) drain() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.busy {
		s.cond.Wait()
	}
	return s.err
}

// progress turns written lines into events of its kind.
type progress struct {
	snd  *sender
	kind string
	mu   sync.Mutex
	buf  bytes.Buffer
}

func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf.Write(b)
	var evs []client.Event
	for {
		i := bytes.IndexByte(p.buf.Bytes(), '\n')
		if i < 0 {
			break
		}
		evs = append(evs, client.Event{Kind: p.kind, Data: string(p.buf.Next(i + 1)[:i])})
	}
	if len(evs) > 0 {
		if err := p.snd.add(evs...); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// flush queues what is left without a newline.
func (p *progress) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rest := p.buf.String(); rest != "" {
		p.buf.Reset()
		p.snd.add(client.Event{Kind: p.kind, Data: rest})
	}
}
