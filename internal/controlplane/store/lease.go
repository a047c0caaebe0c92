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

// ClaimRun gives agent the oldest run of project that it may take: queued, or running with a
// lapsed lease (for a sticky run, only the agent that held it), whose requirements caps
// covers. The claim is a compare-and-swap on the epoch read, so of concurrent claimers of one
// run exactly one wins; the winner's epoch is one more than any before. ErrNoRun when nothing
// fits.
func (s *Store) ClaimRun(ctx context.Context, project, agent string, caps []string, ttl time.Duration) (Lease, error) {
	if ttl <= 0 {
		return Lease{}, fmt.Errorf("claim for agent %s: lease TTL %v must be positive", agent, ttl)
	}
	now := s.now()
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+runColumns+` FROM cp_runs WHERE project_id = ? AND `+claimable+` ORDER BY created_at, id LIMIT 200`), project, now)
	if err != nil {
		return Lease{}, s.wrap("claim", err)
	}
	var candidates []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			rows.Close()
			return Lease{}, s.wrap("claim", err)
		}
		if !covers(caps, r.Requires) || (r.Sticky && r.Status == RunRunning && r.Agent != agent) {
			continue
		}
		candidates = append(candidates, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Lease{}, s.wrap("claim", err)
	}
	for _, r := range candidates {
		if r.Sticky {
			// The workspace's state lives with the agent that claimed its first sticky run.
			var holder string
			err := s.db.QueryRowContext(ctx, s.q(`SELECT agent_id FROM cp_runs WHERE workspace_id = ? AND sticky = 1 AND epoch > 0 ORDER BY created_at, id LIMIT 1`), r.Workspace).Scan(&holder)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return Lease{}, s.wrap("claim "+r.ID, err)
			}
			if holder != "" && holder != agent {
				continue
			}
		}
		expires := now + ttl.Nanoseconds()
		res, err := s.db.ExecContext(ctx, s.q(`UPDATE cp_runs SET status = 'running', agent_id = ?, epoch = epoch + 1, lease_expires = ?, updated_at = ?
			WHERE id = ? AND epoch = ? AND `+claimable),
			agent, expires, now, r.ID, r.Epoch, now)
		if err != nil {
			return Lease{}, s.wrap("claim "+r.ID, err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			continue // another claimer won this one
		}
		r.Status, r.Agent, r.Epoch, r.LeaseExpires = RunRunning, agent, r.Epoch+1, timeOf(expires)
		return Lease{Run: r, Agent: agent, Epoch: r.Epoch, Expires: r.LeaseExpires, TTLSeconds: ttl.Seconds()}, nil
	}
	return Lease{}, ErrNoRun
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
	fe := &FencedError{Run: runID, Agent: agent, Epoch: epoch, Current: r.Epoch}
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
		return r, nil
	}
	return Run{}, fe
}

// fenced runs fn in a transaction that first passed fence.
func (s *Store) fenced(ctx context.Context, op, runID, agent string, epoch int64, fn func(tx *sql.Tx, r Run) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return s.wrap(op, err)
	}
	defer tx.Rollback()
	r, err := s.fence(ctx, tx, runID, agent, epoch)
	if err != nil {
		return err
	}
	if err := fn(tx, r); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return s.wrap(op+": commit", err)
	}
	return nil
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
