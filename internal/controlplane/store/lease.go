package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Lease is what a claim grants: the run, its holder and the fencing epoch every write on the
// run's behalf must carry.
type Lease struct {
	Run     Run       `json:"run"`
	Agent   string    `json:"agent"`
	Epoch   int64     `json:"epoch"`
	Expires time.Time `json:"expires"`
	// TTLSeconds is the lease's length; the holder renews at a third of it.
	TTLSeconds float64 `json:"ttl_seconds"`
}

// claimable is the condition under which a run may be claimed at time now (the second
// placeholder): queued, or running with a lapsed lease.
const claimable = `(status = 'queued' OR (status = 'running' AND lease_expires < ?))`

// claimPageSize is how many claimable runs a claim reads at a time; it reads on, page by
// page, until it finds one the agent may take, so a run it can take never starves behind runs
// it cannot.
const claimPageSize = 200

// ClaimRun gives agent the oldest run of project that it may take: queued, or running with a
// lapsed lease (for a sticky run, only the agent that held it), whose requirements caps
// covers. The claim runs in one write transaction and is a compare-and-swap on the epoch
// read, so of concurrent claimers of one run exactly one wins; the winner's epoch is one more
// than any before. A sticky run whose workspace's agent was revoked can never run (its state
// lives with that agent): it fails, with the reason as its result. ErrNoRun when nothing fits.
func (s *Store) ClaimRun(ctx context.Context, project, agent string, caps []string, ttl time.Duration) (Lease, error) {
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("claim for agent %s: lease TTL %v must be positive", agent, ttl)
	}
	var lease *Lease
	orphans := map[string]Run{} // sticky runs whose workspace's agent was revoked, by holder
	err := s.write(ctx, "claim for agent "+agent, func(tx *sql.Tx) error {
		now := s.now()
		afterCreated, afterID := int64(-1), ""
		for {
			page, err := s.claimPage(ctx, tx, project, agent, now, afterCreated, afterID)
			if err != nil {
				return err
			}
			for _, r := range page {
				if !covers(caps, r.Requires) {
					continue
				}
				if r.Sticky {
					holder, revoked, err := s.stickyHolder(ctx, tx, r.Workspace)
					if err != nil {
						return s.wrap("claim "+r.ID, err)
					}
					if revoked {
						orphans[holder] = r
						continue
					}
					if holder != "" && holder != agent {
						continue
					}
				}
				expires := now + ttl.Nanoseconds()
				res, err := tx.ExecContext(ctx, s.q(`UPDATE cp_runs SET status = 'running', agent_id = ?, epoch = epoch + 1, lease_expires = ?, updated_at = ?
					WHERE id = ? AND epoch = ? AND `+claimable),
					agent, expires, now, r.ID, r.Epoch, now)
				if err != nil {
					return s.wrap("claim "+r.ID, err)
				}
				if n, _ := res.RowsAffected(); n != 1 {
					continue // another claimer won this one
				}
				r.Status, r.Agent, r.Epoch, r.LeaseExpires = RunRunning, agent, r.Epoch+1, timeOf(expires)
				lease = &Lease{Run: r, Agent: agent, Epoch: r.Epoch, Expires: r.LeaseExpires, TTLSeconds: ttl.Seconds()}
				return nil
			}
			if len(page) < claimPageSize {
				return nil
			}
			last := page[len(page)-1]
			afterCreated, afterID = last.Created.UnixNano(), last.ID
		}
	})
	if err != nil {
		return Lease{}, err
	}
	// Each orphan fails in a statement of its own, outside the claim: on PostgreSQL two
	// claimers each holding one orphan's row lock while waiting for the other's could deadlock.
	for holder, r := range orphans {
		if err := s.failOrphan(ctx, r, holder); err != nil {
			return Lease{}, err
		}
	}
	if lease == nil {
		return Lease{}, ErrNoRun
	}
	s.watch.notify(RunTopic(lease.Run.ID))
	return *lease, nil
}

// claimPage reads up to claimPageSize runs of project claimable at now by agent, oldest
// first, after (afterCreated, afterID).
func (s *Store) claimPage(ctx context.Context, tx *sql.Tx, project, agent string, now, afterCreated int64, afterID string) ([]Run, error) {
	rows, err := tx.QueryContext(ctx, s.q(`SELECT `+runColumns+` FROM cp_runs WHERE project_id = ? AND `+claimable+`
		AND NOT (sticky = 1 AND status = 'running' AND agent_id <> ?)
		AND (created_at > ? OR (created_at = ? AND id > ?))
		ORDER BY created_at, id LIMIT `+fmt.Sprint(claimPageSize)), project, now, agent, afterCreated, afterCreated, afterID)
	if err != nil {
		return nil, s.wrap("claim", err)
	}
	defer rows.Close()
	var page []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, s.wrap("claim", err)
		}
		page = append(page, r)
	}
	if err := rows.Err(); err != nil {
		return nil, s.wrap("claim", err)
	}
	return page, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// stickyHolder is the agent a workspace's sticky runs go to: the one that claimed its first
// sticky run ("" if none did yet), and whether that agent was revoked.
func (s *Store) stickyHolder(ctx context.Context, q querier, workspace string) (string, bool, error) {
	var holder string
	var revoked int
	err := q.QueryRowContext(ctx, s.q(`SELECT r.agent_id, COALESCE((SELECT a.revoked FROM cp_agents a WHERE a.id = r.agent_id), 0)
		FROM cp_runs r WHERE r.workspace_id = ? AND r.sticky = 1 AND r.epoch > 0 ORDER BY r.created_at, r.id LIMIT 1`), workspace).Scan(&holder, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return holder, revoked == 1, err
}

// ErrHolderRevoked: a sticky run's workspace keeps its state with an agent that was revoked,
// so no agent can run it.
var ErrHolderRevoked = errors.New("the workspace's agent was revoked")

func holderRevoked(workspace, holder string) error {
	return fmt.Errorf("workspace %s: its state lives with agent %s: %w; run it in a new workspace", workspace, holder, ErrHolderRevoked)
}

// stickyHolderLive refuses a sticky run for a workspace whose agent was revoked.
func (s *Store) stickyHolderLive(ctx context.Context, q querier, workspace string) error {
	holder, revoked, err := s.stickyHolder(ctx, q, workspace)
	if err != nil {
		return s.wrap("workspace "+workspace, err)
	}
	if revoked {
		return holderRevoked(workspace, holder)
	}
	return nil
}

// failOrphan fails a sticky run whose workspace's agent was revoked (if it is still queued or
// running at the epoch read), with the reason as its result.
func (s *Store) failOrphan(ctx context.Context, r Run, holder string) error {
	res, err := s.exec(ctx, s.q(`UPDATE cp_runs SET status = 'failed', result = ?, lease_expires = 0, updated_at = ? WHERE id = ? AND epoch = ? AND status IN ('queued', 'running')`),
		holderRevoked(r.Workspace, holder).Error(), s.now(), r.ID, r.Epoch)
	if err != nil {
		return s.wrap("fail run "+r.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		s.watch.notify(RunTopic(r.ID))
	}
	return nil
}

// NextLapse is when the earliest lease of project's running runs lapses (zero: none runs).
func (s *Store) NextLapse(ctx context.Context, project string) (time.Time, error) {
	var ns int64
	if err := s.db.QueryRowContext(ctx, s.q(`SELECT COALESCE(MIN(lease_expires), 0) FROM cp_runs WHERE project_id = ? AND status = 'running'`), project).Scan(&ns); err != nil {
		return time.Time{}, s.wrap("next lapse", err)
	}
	return timeOf(ns), nil
}

// FencedError says why a write on a run's behalf was refused; it wraps ErrFenced.
type FencedError struct {
	Run, Agent     string
	Epoch, Current int64
	Reason         string
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("run %s: agent %s epoch %d: %s (current epoch %d): %v", e.Run, e.Agent, e.Epoch, e.Reason, e.Current, ErrFenced)
}

func (e *FencedError) Unwrap() error { return ErrFenced }

// holds refuses unless agent holds r at its current epoch with a live lease: the rule every
// write on a run's behalf, and every read of what the run works on, passes.
func (s *Store) holds(r Run, agent string, epoch int64) error {
	fe := &FencedError{Run: r.ID, Agent: agent, Epoch: epoch, Current: r.Epoch}
	switch {
	case r.Epoch != epoch:
		fe.Reason = "stale epoch"
	case r.Agent != agent:
		fe.Reason = "held by " + r.Agent
	case r.Status != RunRunning:
		fe.Reason = "run is " + r.Status
	case r.LeaseExpires.UnixNano() < s.now():
		fe.Reason = "lease lapsed"
	default:
		return nil
	}
	return fe
}

// Held returns the run of project if agent holds it at epoch with a live lease (what an agent
// may read of a run: its plan and revision), else a FencedError.
func (s *Store) Held(ctx context.Context, project, runID, agent string, epoch int64) (Run, error) {
	r, err := s.Run(ctx, project, runID)
	if err != nil {
		return Run{}, err
	}
	if err := s.holds(r, agent, epoch); err != nil {
		return Run{}, err
	}
	return r, nil
}

// fence reads the run inside tx (locking its row where the database can) and refuses unless
// agent holds its current epoch with a live lease. It returns the run.
func (s *Store) fence(ctx context.Context, tx *sql.Tx, runID, agent string, epoch int64) (Run, error) {
	r, err := scanRun(tx.QueryRowContext(ctx, s.q(`SELECT `+runColumns+` FROM cp_runs WHERE id = ?`+s.d.ForUpdate), runID))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("run %s: %w", runID, ErrNotFound)
	}
	if err != nil {
		return Run{}, s.wrap("run "+runID, err)
	}
	if err := s.holds(r, agent, epoch); err != nil {
		return Run{}, err
	}
	return r, nil
}

// fenced runs fn in a write transaction that first passed fence; a success wakes the run's
// watchers.
func (s *Store) fenced(ctx context.Context, op, runID, agent string, epoch int64, fn func(tx *sql.Tx, r Run) error) error {
	err := s.write(ctx, op, func(tx *sql.Tx) error {
		r, err := s.fence(ctx, tx, runID, agent, epoch)
		if err != nil {
			return err
		}
		return fn(tx, r)
	})
	if err == nil {
		s.watch.notify(RunTopic(runID))
	}
	return err
}

// RenewLease extends the lease agent holds at epoch to now+ttl. A lapsed lease is not
// renewed (the agent must claim again, which raises the epoch): between the lapse and the
// renewal another agent may have acted on the run.
func (s *Store) RenewLease(ctx context.Context, runID, agent string, epoch int64, ttl time.Duration) (time.Time, error) {
	var expires int64
	err := s.fenced(ctx, "renew "+runID, runID, agent, epoch, func(tx *sql.Tx, r Run) error {
		now := s.now()
		expires = now + ttl.Nanoseconds()
		res, err := tx.ExecContext(ctx, s.q(`UPDATE cp_runs SET lease_expires = ?, updated_at = ? WHERE id = ? AND epoch = ? AND agent_id = ?`), expires, now, runID, epoch, agent)
		if err != nil {
			return s.wrap("renew "+runID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return &FencedError{Run: runID, Agent: agent, Epoch: epoch, Reason: "changed during renewal"}
		}
		return nil
	})
	return timeOf(expires), err
}

// Event is one entry of a run's append-only log.
type Event struct {
	Run     string    `json:"run"`
	Seq     int64     `json:"seq"`
	Epoch   int64     `json:"epoch"`
	Kind    string    `json:"kind"`
	Data    string    `json:"data"`
	Created time.Time `json:"created"`
}

// AppendEvents appends events (Kind and Data set) to the run's log under the fence and returns
// the sequence numbers given, dense from the run's next one.
func (s *Store) AppendEvents(ctx context.Context, runID, agent string, epoch int64, events []Event) ([]int64, error) {
	var seqs []int64
	err := s.fenced(ctx, "append events to "+runID, runID, agent, epoch, func(tx *sql.Tx, r Run) error {
		now := s.now()
		seq := r.NextSeq
		for _, e := range events {
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cp_events (run_id, seq, epoch, kind, data, created_at) VALUES (?, ?, ?, ?, ?, ?)`),
				runID, seq, epoch, e.Kind, e.Data, now); err != nil {
				return s.wrap(fmt.Sprintf("append event %d to %s", seq, runID), err)
			}
			seqs = append(seqs, seq)
			seq++
		}
		res, err := tx.ExecContext(ctx, s.q(`UPDATE cp_runs SET next_seq = ?, updated_at = ? WHERE id = ? AND epoch = ? AND next_seq = ?`), seq, now, runID, epoch, r.NextSeq)
		if err != nil {
			return s.wrap("append events to "+runID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return &FencedError{Run: runID, Agent: agent, Epoch: epoch, Reason: "changed during append"}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return seqs, nil
}

// Events returns up to limit events of the run with seq > after, in order.
func (s *Store) Events(ctx context.Context, project, runID string, after int64, limit int) ([]Event, error) {
	if _, err := s.Run(ctx, project, runID); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT run_id, seq, epoch, kind, data, created_at FROM cp_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`), runID, after, limit)
	if err != nil {
		return nil, s.wrap("events of "+runID, err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var e Event
		var created int64
		if err := rows.Scan(&e.Run, &e.Seq, &e.Epoch, &e.Kind, &e.Data, &created); err != nil {
			return nil, s.wrap("events of "+runID, err)
		}
		e.Created = timeOf(created)
		out = append(out, e)
	}
	return out, rows.Err()
}

// Projection is what the control plane knows of one resource of a workspace.
type Projection struct {
	Address     string `json:"address"`
	Observation string `json:"observation"`
	ExternalID  string `json:"external_id"`
	// Generation counts the resource's replacements by reset (0: never reset).
	Generation int64     `json:"generation"`
	Run        string    `json:"run"`
	Epoch      int64     `json:"epoch"`
	Updated    time.Time `json:"updated"`
}

// PutProjections upserts resource projections of the run's workspace under the fence.
func (s *Store) PutProjections(ctx context.Context, runID, agent string, epoch int64, ps []Projection) error {
	return s.fenced(ctx, "projections of "+runID, runID, agent, epoch, func(tx *sql.Tx, r Run) error {
		now := s.now()
		for _, p := range ps {
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cp_projections (workspace_id, address, observation, external_id, run_id, epoch, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (workspace_id, address) DO UPDATE SET observation = excluded.observation, external_id = excluded.external_id, run_id = excluded.run_id, epoch = excluded.epoch, updated_at = excluded.updated_at`),
				r.Workspace, p.Address, p.Observation, p.ExternalID, runID, epoch, now); err != nil {
				return s.wrap("projection "+p.Address, err)
			}
			if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cp_projection_generations (workspace_id, address, generation) VALUES (?, ?, ?)
				ON CONFLICT (workspace_id, address) DO UPDATE SET generation = excluded.generation`),
				r.Workspace, p.Address, p.Generation); err != nil {
				return s.wrap("projection "+p.Address, err)
			}
		}
		return nil
	})
}

// Projections lists a workspace's projections by address.
func (s *Store) Projections(ctx context.Context, project, workspace string) ([]Projection, error) {
	if _, err := s.Workspace(ctx, project, workspace); err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT address, observation, external_id,
		COALESCE((SELECT generation FROM cp_projection_generations g WHERE g.workspace_id = cp_projections.workspace_id AND g.address = cp_projections.address), 0),
		run_id, epoch, updated_at FROM cp_projections WHERE workspace_id = ? ORDER BY address`), workspace)
	if err != nil {
		return nil, s.wrap("projections", err)
	}
	defer rows.Close()
	out := []Projection{}
	for rows.Next() {
		var p Projection
		var updated int64
		if err := rows.Scan(&p.Address, &p.Observation, &p.ExternalID, &p.Generation, &p.Run, &p.Epoch, &updated); err != nil {
			return nil, s.wrap("projections", err)
		}
		p.Updated = timeOf(updated)
		out = append(out, p)
	}
	return out, rows.Err()
}

// CompleteRun records the run's outcome (RunSucceeded or RunFailed) and its command's exit
// code under the fence and ends the lease.
func (s *Store) CompleteRun(ctx context.Context, runID, agent string, epoch int64, status, result string, exitCode int) error {
	if status != RunSucceeded && status != RunFailed {
		return fmt.Errorf("complete run %s: status %q (want %s or %s)", runID, status, RunSucceeded, RunFailed)
	}
	return s.fenced(ctx, "complete "+runID, runID, agent, epoch, func(tx *sql.Tx, r Run) error {
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE cp_runs SET status = ?, result = ?, lease_expires = 0, updated_at = ? WHERE id = ? AND epoch = ?`),
			status, result, s.now(), runID, epoch); err != nil {
			return s.wrap("complete "+runID, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE cp_run_specs SET exit_code = ? WHERE run_id = ?`), exitCode, runID); err != nil {
			return s.wrap("complete "+runID, err)
		}
		return nil
	})
}

// PutRunPlan stores the plan file a plan run made (data, requiring requires) as a plan of the
// run's workspace and revision, under the fence, and records it as the run's output.
func (s *Store) PutRunPlan(ctx context.Context, runID, agent string, epoch int64, data []byte, requires []string) (Plan, error) {
	var p Plan
	err := s.fenced(ctx, "plan of "+runID, runID, agent, epoch, func(tx *sql.Tx, r Run) error {
		p = Plan{ID: newID("plan_"), Project: r.Project, Workspace: r.Workspace, Revision: r.Revision, Digest: Digest(data),
			Requires: decodeList(encodeList(requires)), Created: timeOf(s.now())}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cp_plans (id, project_id, workspace_id, revision, digest, data, requires, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
			p.ID, p.Project, p.Workspace, p.Revision, p.Digest, data, encodeList(requires), p.Created.UnixNano()); err != nil {
			return s.wrap("plan of "+runID, err)
		}
		if _, err := tx.ExecContext(ctx, s.q(`UPDATE cp_run_specs SET output_plan = ? WHERE run_id = ?`), p.ID, runID); err != nil {
			return s.wrap("plan of "+runID, err)
		}
		return nil
	})
	return p, err
}
