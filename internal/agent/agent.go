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
	"sync"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/client"
)

// Job is one claimed run handed to a Runner.
type Job struct {
	Lease    *client.Lease
	Plan     []byte    // the stored plan file (none for a command run)
	Bundle   []byte    // the revision (topology bundle) the run works on
	Progress io.Writer // each line becomes a "progress" event of the run (the command's stdout)
	Errors   io.Writer // each line becomes a "stderr" event (the command's stderr)
	// Project stores projections under the lease while the run goes on; PlanOutput stores
	// the plan file a plan run made. A fenced refusal of either cancels the run.
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
	// Poll is the wait between claims when nothing is queued; RenewEvery the renewal period
	// (0: a third of the lease's TTL as the server granted it).
	Poll, RenewEvery time.Duration
}

// Serve heartbeats and executes runs until ctx ends.
func (a *Agent) Serve(ctx context.Context) error {
	for {
		if err := a.Client.Heartbeat(ctx, a.Caps); err != nil && ctx.Err() == nil {
			a.Log.Warn("heartbeat failed", "err", err)
		}
		l, err := a.Client.Claim(ctx)
		if err != nil && ctx.Err() == nil {
			a.Log.Warn("claim failed", "err", err)
		}
		if l != nil {
			a.execute(ctx, l)
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(a.Poll):
		}
	}
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
	var mu sync.Mutex // one event batch at a time, so stdout and stderr lines keep their order
	pw := &progress{ctx: runCtx, a: a.Client, l: l, cancel: cancel, kind: "progress", post: &mu}
	ew := &progress{ctx: runCtx, a: a.Client, l: l, cancel: cancel, kind: "stderr", post: &mu}
	fenced := func(err error) error {
		if errors.Is(err, client.ErrFenced) {
			cancel(fmt.Errorf("lease lost: %w", err))
		}
		return err
	}
	job := Job{Lease: l, Plan: plan, Bundle: bundle, Progress: pw, Errors: ew,
		Project: func(ps ...client.Projection) error { return fenced(a.Client.Projections(runCtx, l, ps...)) },
		PlanOutput: func(b []byte) error {
			_, err := a.Client.PlanOutput(runCtx, l, b)
			return fenced(err)
		}}
	out, err := a.Run(runCtx, job)
	pw.flush()
	ew.flush()
	a.finish(ctx, l, log, out, err, runCtx)
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
	if len(out.Projections) > 0 {
		if perr := a.Client.Projections(ctx, l, out.Projections...); perr != nil {
			log.Warn("projections refused", "err", perr)
		}
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

// progress turns written lines into events of its kind; a fenced refusal cancels the run.
type progress struct {
	ctx    context.Context
	a      *client.Agent
	l      *client.Lease
	cancel context.CancelCauseFunc
	kind   string
	post   *sync.Mutex // shared by a run's writers
	buf    bytes.Buffer
}

func (p *progress) Write(b []byte) (int, error) {
	p.post.Lock()
	defer p.post.Unlock()
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
		if _, err := p.a.Events(p.ctx, p.l, evs...); err != nil {
			if errors.Is(err, client.ErrFenced) {
				p.cancel(fmt.Errorf("lease lost: %w", err))
			}
			return 0, err
		}
	}
	return len(b), nil
}

func (p *progress) flush() {
	p.post.Lock()
	defer p.post.Unlock()
	rest := p.buf.String()
	p.buf.Reset()
	if rest != "" {
		p.a.Events(p.ctx, p.l, client.Event{Kind: p.kind, Data: rest})
	}
}
