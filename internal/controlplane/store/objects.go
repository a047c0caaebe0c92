package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Digest is the content address of bytes: "sha256:" and the hex digest.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Revision is an immutable topology bundle, addressed by its digest.
type Revision struct {
	Digest  string    `json:"digest"`
	Size    int       `json:"size"`
	Created time.Time `json:"created"`
}

// PutRevision stores bundle under its digest. Putting the same bytes again is a no-op that
// returns the same digest (created reports which happened); a stored revision never changes.
func (s *Store) PutRevision(ctx context.Context, project string, bundle []byte) (rev Revision, created bool, err error) {
	if _, err := s.Project(ctx, project); err != nil {
		return Revision{}, false, err
	}
	rev = Revision{Digest: Digest(bundle), Size: len(bundle), Created: timeOf(s.now())}
	res, err := s.exec(ctx, s.q(`INSERT INTO cp_revisions (project_id, digest, bundle, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (project_id, digest) DO NOTHING`),
		project, rev.Digest, bundle, rev.Created.UnixNano())
	if err != nil {
		return Revision{}, false, s.wrap("put revision "+rev.Digest, err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		var c int64
		if err := s.db.QueryRowContext(ctx, s.q(`SELECT created_at FROM cp_revisions WHERE project_id = ? AND digest = ?`), project, rev.Digest).Scan(&c); err != nil {
			return Revision{}, false, s.wrap("put revision "+rev.Digest, err)
		}
		rev.Created = timeOf(c)
	}
	return rev, n == 1, nil
}

// RevisionBundle returns a revision's bytes, checked against its digest.
func (s *Store) RevisionBundle(ctx context.Context, project, digest string) ([]byte, error) {
	var b []byte
	err := s.db.QueryRowContext(ctx, s.q(`SELECT bundle FROM cp_revisions WHERE project_id = ? AND digest = ?`), project, digest).Scan(&b)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("revision %s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return nil, s.wrap("revision "+digest, err)
	}
	if got := Digest(b); got != digest {
		return nil, s.wrap("revision "+digest, fmt.Errorf("stored bundle hashes to %s: the database was altered", got))
	}
	return b, nil
}

// Plan is a stored-plan file (internal/plans) of a workspace, made from a revision.
type Plan struct {
	ID        string    `json:"id"`
	Project   string    `json:"project"`
	Workspace string    `json:"workspace"`
	Revision  string    `json:"revision"`
	Digest    string    `json:"digest"`
	Requires  []string  `json:"requires"`
	Created   time.Time `json:"created"`
}

// PutPlan stores the bytes of a stored-plan file and the capabilities applying it requires.
// The caller has checked data is a plan file (which by construction holds no secret
// plaintext and no private envelope).
func (s *Store) PutPlan(ctx context.Context, project, workspace, revision string, data []byte, requires []string) (Plan, error) {
	if _, err := s.Workspace(ctx, project, workspace); err != nil {
		return Plan{}, err
	}
	if revision != "" {
		var one int
		err := s.db.QueryRowContext(ctx, s.q(`SELECT 1 FROM cp_revisions WHERE project_id = ? AND digest = ?`), project, revision).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return Plan{}, fmt.Errorf("revision %s: %w", revision, ErrNotFound)
		}
		if err != nil {
			return Plan{}, s.wrap("put plan", err)
		}
	}
	p := Plan{ID: newID("plan_"), Project: project, Workspace: workspace, Revision: revision, Digest: Digest(data),
		Requires: decodeList(encodeList(requires)), Created: timeOf(s.now())}
	if _, err := s.exec(ctx, s.q(`INSERT INTO cp_plans (id, project_id, workspace_id, revision, digest, data, requires, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`),
		p.ID, project, workspace, revision, p.Digest, data, encodeList(requires), p.Created.UnixNano()); err != nil {
		return Plan{}, s.wrap("put plan", err)
	}
	return p, nil
}

// PlanData returns a plan and its stored bytes.
func (s *Store) PlanData(ctx context.Context, project, id string) (Plan, []byte, error) {
	p := Plan{ID: id, Project: project}
	var requires string
	var created int64
	var data []byte
	err := s.db.QueryRowContext(ctx, s.q(`SELECT workspace_id, revision, digest, data, requires, created_at FROM cp_plans WHERE id = ? AND project_id = ?`), id, project).
		Scan(&p.Workspace, &p.Revision, &p.Digest, &data, &requires, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Plan{}, nil, fmt.Errorf("plan %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Plan{}, nil, s.wrap("plan "+id, err)
	}
	p.Requires, p.Created = decodeList(requires), timeOf(created)
	return p, data, nil
}

// Run statuses.
const (
	RunQueued    = "queued"
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
)

// Run is one operation of a workspace, executed by the agent holding its lease: apply or
// destroy of a stored plan, or a remote command (plan, apply, destroy, reset, state list,
// state show, output) run on the workspace's topology revision with Args.
type Run struct {
	ID        string   `json:"id"`
	Project   string   `json:"project"`
	Workspace string   `json:"workspace"`
	Plan      string   `json:"plan"`
	Op        string   `json:"op"`
	Status    string   `json:"status"`
	Requires  []string `json:"requires"`
	// Sticky: the workspace's state lives with its agent (a local backend), so after a lapse
	// only that agent may claim the run again, and a workspace's runs go to the agent that
	// claimed its first sticky run.
	Sticky       bool      `json:"sticky"`
	Agent        string    `json:"agent,omitempty"`
	Epoch        int64     `json:"epoch"`
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
	NextSeq      int64     `json:"next_seq"`
	Result       string    `json:"result,omitempty"`
	Created      time.Time `json:"created"`
	// Revision is the topology bundle a run without a plan works on (with a plan: the plan's).
	Revision string   `json:"revision,omitempty"`
	Args     []string `json:"args"`
	// ExitCode is the command's exit code once the run ended (the CLI exits with it).
	ExitCode int `json:"exit_code"`
	// OutputPlan is the plan a plan run stored.
	OutputPlan string `json:"output_plan,omitempty"`
}

// RunSpec is what a new run does.
type RunSpec struct {
	Workspace string   // with Plan: the plan's
	Plan      string   // a stored plan, or empty for a command on Revision
	Revision  string   // with Plan: the plan's
	Op        string   // apply, destroy, reset, plan, state list, state show, output
	Args      []string // the command's flags and arguments (the agent checks them)
	Requires  []string // with Plan: the plan's
	Sticky    bool
}

// CreateRun queues a run of plan on its workspace; it requires what the plan requires.
func (s *Store) CreateRun(ctx context.Context, project, planID, op string, sticky bool) (Run, error) {
	return s.QueueRun(ctx, project, RunSpec{Plan: planID, Op: op, Sticky: sticky})
}

// QueueRun queues a run. With a plan, the run's workspace, revision and requirements are the
// plan's; without one, the spec names a workspace and a stored revision.
func (s *Store) QueueRun(ctx context.Context, project string, spec RunSpec) (Run, error) {
	if spec.Plan != "" {
		p, _, err := s.PlanData(ctx, project, spec.Plan)
		if err != nil {
			return Run{}, err
		}
		spec.Workspace, spec.Revision, spec.Requires = p.Workspace, p.Revision, p.Requires
	} else {
		if _, err := s.Workspace(ctx, project, spec.Workspace); err != nil {
			return Run{}, err
		}
		if _, err := s.RevisionBundle(ctx, project, spec.Revision); err != nil {
			return Run{}, err
		}
	}
	r := Run{ID: newID("run_"), Project: project, Workspace: spec.Workspace, Plan: spec.Plan, Op: spec.Op, Status: RunQueued,
		Requires: decodeList(encodeList(spec.Requires)), Sticky: spec.Sticky, NextSeq: 1, Created: timeOf(s.now()),
		Revision: spec.Revision, Args: append([]string{}, spec.Args...)}
	err := s.write(ctx, "create run", func(tx *sql.Tx) error {
		if r.Sticky {
			if err := s.stickyHolderLive(ctx, tx, r.Workspace); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cp_runs (id, project_id, workspace_id, plan_id, op, status, requires, sticky, agent_id, epoch, lease_expires, next_seq, result, created_at, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', 0, 0, 1, '', ?, ?)`),
			r.ID, project, r.Workspace, r.Plan, r.Op, RunQueued, encodeList(r.Requires), boolInt(r.Sticky), r.Created.UnixNano(), r.Created.UnixNano()); err != nil {
			return s.wrap("create run", err)
		}
		args, _ := json.Marshal(r.Args)
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO cp_run_specs (run_id, revision, args, exit_code, output_plan) VALUES (?, ?, ?, 0, '')`),
			r.ID, r.Revision, string(args)); err != nil {
			return s.wrap("create run", err)
		}
		return nil
	})
	if err != nil {
		return Run{}, err
	}
	s.watch.notify(RunsTopic(project))
	return r, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// runColumns read a run with its spec (runs from before migration 2 have none).
const runColumns = `id, project_id, workspace_id, plan_id, op, status, requires, sticky, agent_id, epoch, lease_expires, next_seq, result, created_at,
	COALESCE((SELECT revision FROM cp_run_specs WHERE run_id = cp_runs.id), ''),
	COALESCE((SELECT args FROM cp_run_specs WHERE run_id = cp_runs.id), '[]'),
	COALESCE((SELECT exit_code FROM cp_run_specs WHERE run_id = cp_runs.id), 0),
	COALESCE((SELECT output_plan FROM cp_run_specs WHERE run_id = cp_runs.id), '')`

type scanner interface{ Scan(...any) error }

func scanRun(sc scanner) (Run, error) {
	var r Run
	var requires, args string
	var sticky int
	var expires, created, exit int64
	if err := sc.Scan(&r.ID, &r.Project, &r.Workspace, &r.Plan, &r.Op, &r.Status, &requires, &sticky, &r.Agent, &r.Epoch, &expires, &r.NextSeq, &r.Result, &created,
		&r.Revision, &args, &exit, &r.OutputPlan); err != nil {
		return Run{}, err
	}
	r.Requires, r.Sticky, r.LeaseExpires, r.Created = decodeList(requires), sticky == 1, timeOf(expires), timeOf(created)
	r.ExitCode = int(exit)
	if err := json.Unmarshal([]byte(args), &r.Args); err != nil {
		return Run{}, fmt.Errorf("run %s: args: %w", r.ID, err)
	}
	if r.Args == nil {
		r.Args = []string{}
	}
	return r, nil
}

// Run returns the run id of project.
func (s *Store) Run(ctx context.Context, project, id string) (Run, error) {
	r, err := scanRun(s.db.QueryRowContext(ctx, s.q(`SELECT `+runColumns+` FROM cp_runs WHERE id = ? AND project_id = ?`), id, project))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, fmt.Errorf("run %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Run{}, s.wrap("run "+id, err)
	}
	return r, nil
}

// Runs lists the runs of a workspace, oldest first.
func (s *Store) Runs(ctx context.Context, project, workspace string) ([]Run, error) {
	rows, err := s.db.QueryContext(ctx, s.q(`SELECT `+runColumns+` FROM cp_runs WHERE project_id = ? AND workspace_id = ? ORDER BY created_at, id`), project, workspace)
	if err != nil {
		return nil, s.wrap("runs", err)
	}
	defer rows.Close()
	out := []Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, s.wrap("runs", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
