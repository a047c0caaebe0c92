package upgrade

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
	"zyvor.dev/sysbox/fluxvm/evidence"
	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/internal/durable"
)

// Errors the CLI maps to exit codes.
var (
	ErrPlanModified      = errors.New("plan modified since the transaction began")
	ErrTransactionExists = errors.New("transaction already exists")
	ErrNoTransaction     = errors.New("no such transaction")
	ErrAlreadyCommitted  = errors.New("transaction already committed")
	ErrProbeFailed       = errors.New("probe failed")
	ErrNotRetryable      = errors.New("only a manual-intervention transaction's rollback can be retried")
)

// PlanModifiedError carries both hashes (F3).
type PlanModifiedError struct {
	TransactionID string
	Begun, Now    string
}

func (e *PlanModifiedError) Error() string {
	return fmt.Sprintf("transaction %s: %v: began with plan sha256 %s, this plan is sha256 %s", e.TransactionID, ErrPlanModified, e.Begun, e.Now)
}

func (e *PlanModifiedError) Unwrap() error { return ErrPlanModified }

// MaxHookOutput bounds each captured stream of a hook, and its log file as a whole.
const MaxHookOutput = 256 << 10

// Engine runs upgrade transactions. Fields are set once and not changed while it runs.
type Engine struct {
	Store  bpfmap.Store
	Runner argv.Runner
	// Progress receives human progress lines; nil for none (e.g. not a TTY).
	Progress io.Writer
	// Now returns the current time (UTC); nil means time.Now.
	Now func() time.Time
	// AfterRecord, when set, is called with each record's Key() right after it was synced.
	// The crash harness uses it (test builds only) to SIGKILL the process at that point.
	AfterRecord func(key string)
	// Signer signs EVIDENCE.sha256; nil means evidence.SSHKeygen.
	Signer evidence.Signer
	// RepairTornTail lets resume/rollback drop an unterminated last journal record (an append
	// that never returned after a power loss), keeping its bytes; other corruption is refused.
	RepairTornTail bool
	// CheckBPFFS makes Probe require bpffs_root to be a bpf filesystem (off with the fake store).
	CheckBPFFS  bool
	ToolVersion string
}

// Result is how a transaction ended (or stands).
type Result struct {
	TransactionID string `json:"transaction_id"`
	Dir           string `json:"dir"`
	State         string `json:"state"`
	Reason        string `json:"reason,omitempty"`
	PlanSHA256    string `json:"plan_sha256"`
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now().UTC()
	}
	return time.Now().UTC()
}

func (e *Engine) progressf(format string, args ...any) {
	if e.Progress != nil {
		fmt.Fprintf(e.Progress, format+"\n", args...)
	}
}

// TxDir is the plan's transaction directory.
func TxDir(p *Plan) string { return filepath.Join(p.StateDir, p.TransactionID) }

// LockPath is the transaction's lock file; it lives beside the directory and is never unlinked.
func LockPath(stateDir, txID string) string { return filepath.Join(stateDir, txID+".lock") }

// failpoint calls AfterRecord (crash tests) with a point name: a record's Key(), "ran:C:S" after
// a step's action finished but before its outcome record, or "final:FILE".
func (e *Engine) failpoint(key string) {
	if e.AfterRecord != nil {
		e.AfterRecord(key)
	}
}

// tx is one transaction being driven by this process, holding its lock.
type tx struct {
	e    *Engine
	plan *Plan
	dir  string
	lock *durable.FileLock
	log  *durable.Log
	view *txView
	// hookLog is the log runStep created for the hook of the step it is about to start.
	hookLog *hookLog
}

func (e *Engine) open(p *Plan) (*tx, error) {
	if err := durable.MkdirAll(p.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("transaction %s: state dir: %w", p.TransactionID, err)
	}
	lock, err := durable.Lock(LockPath(p.StateDir, p.TransactionID))
	if err != nil {
		return nil, fmt.Errorf("transaction %s: %w", p.TransactionID, err)
	}
	t := &tx{e: e, plan: p, dir: TxDir(p), lock: lock}
	if procs := liveHooks(t.dir); len(procs) > 0 {
		lock.Unlock()
		return nil, &HookStillRunningError{TransactionID: p.TransactionID, Procs: procs}
	}
	repaired := 0
	if e.RepairTornTail {
		n, err := repairTornTail(t.dir)
		if err != nil {
			lock.Unlock()
			return nil, fmt.Errorf("transaction %s: repair journal: %w", p.TransactionID, err)
		}
		repaired = n
	}
	evs, err := ReadJournal(t.dir)
	if err != nil {
		lock.Unlock()
		return nil, fmt.Errorf("transaction %s: %w", p.TransactionID, err)
	}
	t.view = replay(evs)
	if t.view.begin == nil {
		if err := checkNoStateWithoutJournal(t.dir); err != nil {
			lock.Unlock()
			return nil, fmt.Errorf("transaction %s: %w", p.TransactionID, err)
		}
	}
	if repaired > 0 {
		e.progressf("journal: dropped a torn tail of %d bytes (kept in %s)", repaired, "journal.torn-*")
		if err := t.appendEvent(Event{Type: EvJournalRepaired, Reason: fmt.Sprintf("dropped an unterminated last record of %d bytes (never acknowledged); kept as journal.torn-*", repaired)}); err != nil {
			t.close()
			return nil, err
		}
	}
	return t, nil
}

func (t *tx) close() {
	if t.log != nil {
		t.log.Close()
	}
	t.lock.Unlock()
}

func (t *tx) appendEvent(ev Event) error {
	if t.log == nil {
		l, err := durable.OpenLog(filepath.Join(t.dir, JournalFile))
		if err != nil {
			return fmt.Errorf("transaction %s: %w", t.plan.TransactionID, err)
		}
		t.log = l
	}
	ev.Seq = len(t.view.events) + 1
	ev.Time = t.e.now()
	if err := t.log.Append(journalKind, journalVersion, ev); err != nil {
		return fmt.Errorf("transaction %s: journal: %w", t.plan.TransactionID, err)
	}
	t.view = replay(append(t.view.events, ev))
	t.e.failpoint(ev.Key())
	return nil
}

func (t *tx) checkHash() error {
	if t.view.begin != nil && t.view.begin.PlanSHA256 != t.plan.SHA256 {
		return &PlanModifiedError{TransactionID: t.plan.TransactionID, Begun: t.view.begin.PlanSHA256, Now: t.plan.SHA256}
	}
	return nil
}

func (t *tx) result() Result {
	r := Result{TransactionID: t.plan.TransactionID, Dir: t.dir, State: t.view.state(), PlanSHA256: t.plan.SHA256}
	if t.view.end != nil {
		r.Reason = t.view.end.Reason
	}
	return r
}

// Run begins a new transaction and drives it to a terminal state. It refuses an existing
// transaction (use Resume) and a plan whose live probe fails.
func (e *Engine) Run(ctx context.Context, p *Plan) (Result, error) {
	t, err := e.open(p)
	if err != nil {
		return Result{}, err
	}
	defer t.close()
	if t.view.begin != nil {
		return t.result(), fmt.Errorf("transaction %s (%s): %w; use resume, rollback or status", p.TransactionID, t.view.state(), ErrTransactionExists)
	}
	rep := e.probe(ctx, p, true)
	if !rep.OK {
		return Result{}, fmt.Errorf("transaction %s: %w:\n%s", p.TransactionID, ErrProbeFailed, rep.Problems())
	}
	if err := t.begin(); err != nil {
		return t.result(), err
	}
	return t.drive(ctx)
}

// Resume continues a transaction exactly where its journal stops (F15).
func (e *Engine) Resume(ctx context.Context, p *Plan) (Result, error) {
	t, err := e.open(p)
	if err != nil {
		return Result{}, err
	}
	defer t.close()
	if err := t.checkHash(); err != nil {
		return t.result(), err
	}
	if t.view.begin == nil {
		if _, err := os.Stat(filepath.Join(t.dir, JournalFile)); err != nil {
			return Result{}, fmt.Errorf("transaction %s: %w in %s", p.TransactionID, ErrNoTransaction, p.StateDir)
		}
		// Crashed before the begin record was synced: nothing ran yet.
		if err := t.begin(); err != nil {
			return t.result(), err
		}
	}
	return t.drive(ctx)
}

// Rollback rolls back a transaction from any non-terminal point (F13). A rolled-back or
// manual-intervention transaction is only finalized again; a committed one is refused.
func (e *Engine) Rollback(ctx context.Context, p *Plan, reason string) (Result, error) {
	t, err := e.open(p)
	if err != nil {
		return Result{}, err
	}
	defer t.close()
	return t.rollbackNow(ctx, reason)
}

// RetryRollback re-runs the failed rollback steps of a manual-intervention transaction (and the
// steps a failed rollback hook held back), after the operator fixed the cause. Steps that
// succeeded are not run again. The retry is journaled; the failed attempt's records, hook logs
// and final status stay in the directory and so in the new evidence. A successful retry ends
// rolled-back; another failure ends manual-intervention again.
func (e *Engine) RetryRollback(ctx context.Context, p *Plan, reason string) (Result, error) {
	t, err := e.open(p)
	if err != nil {
		return Result{}, err
	}
	defer t.close()
	if err := t.checkBegun(); err != nil {
		return t.result(), err
	}
	if t.view.end == nil && t.view.retries > 0 {
		return t.drive(ctx) // a retry interrupted by a crash: carry on
	}
	if t.view.end == nil || t.view.end.State != StateManualIntervention {
		return t.result(), fmt.Errorf("transaction %s is %s: %w", p.TransactionID, t.view.state(), ErrNotRetryable)
	}
	if err := t.setAsideEvidence(); err != nil {
		return t.result(), err
	}
	if err := t.appendEvent(Event{Type: EvRollbackRetry, Reason: reason}); err != nil {
		return t.result(), err
	}
	return t.drive(ctx)
}

// setAsideEvidence keeps the failed attempt's final status as journal.final.<state>-<n>.json and
// removes its manifest and signature, durably, before the retry is journaled: the evidence
// written when the retry ends then covers both attempts. A crash in between leaves a terminal
// transaction with pending evidence, which resume or reconcile finalize as before.
func (t *tx) setAsideEvidence() error {
	kept := filepath.Join(t.dir, fmt.Sprintf("journal.final.%s-%d.json", t.view.end.State, t.view.retries+1))
	if err := os.Rename(filepath.Join(t.dir, FinalFile), kept); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("transaction %s: keep the failed attempt's status: %w", t.plan.TransactionID, err)
	}
	for _, f := range []string{evidence.SignatureFile, evidence.ManifestFile} {
		if err := os.Remove(filepath.Join(t.dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("transaction %s: %w", t.plan.TransactionID, err)
		}
	}
	return durable.SyncDir(t.dir)
}

// checkBegun refuses a plan other than the one the transaction began with, and a transaction
// that never began.
func (t *tx) checkBegun() error {
	if err := t.checkHash(); err != nil {
		return err
	}
	if t.view.begin == nil {
		return fmt.Errorf("transaction %s: %w in %s", t.plan.TransactionID, ErrNoTransaction, t.plan.StateDir)
	}
	return nil
}

func (t *tx) rollbackNow(ctx context.Context, reason string) (Result, error) {
	p := t.plan
	if err := t.checkBegun(); err != nil {
		return t.result(), err
	}
	if t.view.end != nil {
		if t.view.end.State == StateCommitted {
			if err := t.finalize(ctx); err != nil {
				return t.result(), err
			}
			return t.result(), fmt.Errorf("transaction %s: %w; start a new transaction to downgrade", p.TransactionID, ErrAlreadyCommitted)
		}
		return t.drive(ctx)
	}
	if t.view.rollback == nil {
		if err := t.appendEvent(Event{Type: EvRollbackBegin, Reason: reason}); err != nil {
			return t.result(), err
		}
	}
	return t.drive(ctx)
}

func (t *tx) begin() error {
	p := t.plan
	if err := durable.MkdirAll(t.dir, 0o700); err != nil {
		return fmt.Errorf("transaction %s: %w", p.TransactionID, err)
	}
	if err := durable.WriteFile(filepath.Join(t.dir, PlanFile), p.Source, 0o600); err != nil {
		return fmt.Errorf("transaction %s: %w", p.TransactionID, err)
	}
	names := make([]string, len(p.Components))
	for i, c := range p.Components {
		names[i] = c.Name
	}
	return t.appendEvent(Event{Type: EvBegin, TransactionID: p.TransactionID, PlanSHA256: p.SHA256, ToolVersion: t.e.ToolVersion, Components: names})
}

// drive moves the transaction forward from wherever the journal says it is.
func (t *tx) drive(ctx context.Context) (Result, error) {
	if t.view.end == nil && t.view.rollback == nil {
		if err := t.forward(ctx); err != nil {
			return t.result(), err
		}
	}
	if t.view.end == nil && t.view.rollback != nil {
		if err := t.rollbackPhase(ctx); err != nil {
			return t.result(), err
		}
	}
	if err := t.finalize(ctx); err != nil {
		return t.result(), err
	}
	return t.result(), nil
}

// forward runs the forward steps (F12). A step failure starts the rollback phase; an error
// return means the journal could not be written (the process must stop: nothing is claimed).
func (t *tx) forward(ctx context.Context) error {
	for ci := range t.plan.Components {
		c := &t.plan.Components[ci]
		for _, step := range ForwardSteps {
			st := t.view.step(false, c.Name, step)
			if st.Done {
				continue
			}
			if st.Failed {
				return t.appendEvent(Event{Type: EvRollbackBegin, Reason: fmt.Sprintf("component %s: %s failed: %s", c.Name, step, st.Error)})
			}
			if st.inDoubt() && step == StepApply {
				// The apply hook may have run partly; running it again is not known to be safe.
				msg := "interrupted (process died while apply was in progress); not re-running a non-idempotent step"
				if err := t.appendEvent(Event{Type: EvStepFailed, Component: c.Name, Step: step, Attempt: st.Attempts, Error: msg}); err != nil {
					return err
				}
				return t.appendEvent(Event{Type: EvRollbackBegin, Reason: fmt.Sprintf("component %s: apply interrupted", c.Name)})
			}
			stepErr, err := t.runStep(ctx, c, step, st.Attempts+1, t.runForward)
			if err != nil {
				return err
			}
			if stepErr != nil {
				return t.appendEvent(Event{Type: EvRollbackBegin, Reason: fmt.Sprintf("component %s: %s failed: %v", c.Name, step, stepErr)})
			}
		}
	}
	return t.appendEvent(Event{Type: EvEnd, State: StateCommitted})
}

// runStep runs one attempt of a step and journals its start and its outcome. stepErr is the
// step's own failure (journaled as failed; the caller decides what follows); err is a journal
// write error or an interruption, which stop the engine. A step stopped by a signal is left
// unjournaled, exactly as a crash would leave it, so that resume or rollback decide.
func (t *tx) runStep(ctx context.Context, c *Component, step string, attempt int,
	run func(ctx context.Context, c *Component, step string, attempt int) (json.RawMessage, error)) (stepErr, err error) {
	if err := interrupted(ctx); err != nil {
		return nil, err
	}
	// The hook's log is created before the start is journaled: a log that cannot be created
	// (a full or read-only disk) stops the engine with the step not started, so resume runs the
	// hook instead of treating one that never ran as interrupted mid-way.
	if h := hookOf(c, step); h != nil {
		hl, err := t.createHookLog(c, step, h, attempt)
		if err != nil {
			return nil, fmt.Errorf("transaction %s: %s %s: %w; the step was not started: resume the transaction once this is mended",
				t.plan.TransactionID, c.Name, step, err)
		}
		t.hookLog = hl
		defer func() { // a step that failed before its hook ran leaves the log unused
			if t.hookLog != nil {
				t.hookLog.f.Close()
				t.hookLog = nil
			}
		}()
	}
	if err := t.appendEvent(Event{Type: EvStepStart, Component: c.Name, Step: step, Attempt: attempt}); err != nil {
		return nil, err
	}
	t.e.progressf("%s: %s ...", c.Name, step)
	detail, stepErr := run(ctx, c, step, attempt)
	t.e.failpoint("ran:" + c.Name + ":" + step)
	if err := interrupted(ctx); err != nil && stepErr != nil {
		// Stopped by a signal, not failed.
		return nil, err
	}
	if stateWriteFailed(t.dir, stepErr) {
		// The tool's own storage failed, not the step: journaling a failure would turn a full
		// disk into a rollback (or, in a rollback, into manual-intervention). Stop, as for a
		// journal write error; resume decides once the directory is writable again.
		return nil, fmt.Errorf("transaction %s: %s %s: %w; the transaction is still running: resume it once %s is writable",
			t.plan.TransactionID, c.Name, step, stepErr, t.dir)
	}
	if stepErr != nil {
		t.e.progressf("%s: %s failed: %v", c.Name, step, stepErr)
		if err := t.appendEvent(Event{Type: EvStepFailed, Component: c.Name, Step: step, Attempt: attempt, Error: stepErr.Error(), Detail: detail}); err != nil {
			return nil, err
		}
		return stepErr, nil
	}
	return nil, t.appendEvent(Event{Type: EvStepDone, Component: c.Name, Step: step, Attempt: attempt, Detail: detail})
}

// stateWriteFailed reports whether err is the transaction directory refusing a write because
// its file system is full or read-only.
func stateWriteFailed(dir string, err error) bool {
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) && !errors.Is(err, syscall.EROFS) {
		return false
	}
	var pe *fs.PathError
	return errors.As(err, &pe) && strings.HasPrefix(pe.Path, dir+string(filepath.Separator))
}

func (t *tx) runForward(ctx context.Context, c *Component, step string, attempt int) (json.RawMessage, error) {
	switch step {
	case StepPreflight:
		if err := c.StateABI.Check(); err != nil {
			return nil, fmt.Errorf("component %s: %w", c.Name, err)
		}
		return nil, t.runHook(ctx, c, step, hookOf(c, step), attempt)
	case StepSnapshot:
		return t.snapshot(ctx, c)
	case StepApply, StepHealth:
		return nil, t.runHook(ctx, c, step, hookOf(c, step), attempt)
	case StepRestore:
		return t.restoreMaps(ctx, c, false)
	}
	return nil, fmt.Errorf("unknown step %s", step)
}

// ErrInterrupted is returned when a signal (context cancellation) stopped the engine between or
// during steps. The transaction stays running; resume or rollback continue it.
var ErrInterrupted = errors.New("interrupted; the transaction is still running: resume or rollback it")

func interrupted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w (%v)", ErrInterrupted, err)
	}
	return nil
}

// needsRollback: a component is rolled back once its apply hook has started (F13 includes the
// failed component).
func (t *tx) needsRollback(c *Component) bool {
	return t.view.step(false, c.Name, StepApply).Attempts > 0
}

// rollbackPhase rolls back applied components in reverse order. Rollback steps are re-run after a
// crash (rollback hooks must be idempotent); a failed one leaves the component for an operator.
func (t *tx) rollbackPhase(ctx context.Context) error {
	var failures []string
	for ci := len(t.plan.Components) - 1; ci >= 0; ci-- {
		c := &t.plan.Components[ci]
		if !t.needsRollback(c) {
			continue
		}
		for _, step := range RollbackSteps {
			if step == StepRollbackHealth && c.Hooks.RollbackHealth == nil {
				continue
			}
			st := t.view.step(true, c.Name, step)
			if st.Done {
				continue
			}
			if st.Failed {
				failures = append(failures, fmt.Sprintf("component %s: %s: %s", c.Name, step, st.Error))
				if step == StepRollback {
					break // old programs and pins may be missing: do not restore into them
				}
				continue
			}
			if step == StepRollbackHealth && t.componentRollbackFailed(c) {
				continue
			}
			stepErr, err := t.runStep(ctx, c, step, st.Attempts+1, t.runRollbackStep)
			if err != nil {
				return err
			}
			if stepErr != nil {
				failures = append(failures, fmt.Sprintf("component %s: %s: %v", c.Name, step, stepErr))
				if step == StepRollback {
					break
				}
			}
		}
	}
	retried := ""
	if n := t.view.retries; n > 0 {
		retried = fmt.Sprintf(" (rollback retried %d time(s) after manual intervention)", n)
	}
	if len(failures) > 0 {
		return t.appendEvent(Event{Type: EvEnd, State: StateManualIntervention, Reason: "rollback did not complete: " + strings.Join(failures, "; ") + " (after: " + t.view.rollback.Reason + ")" + retried})
	}
	return t.appendEvent(Event{Type: EvEnd, State: StateRolledBack, Reason: t.view.rollback.Reason + retried})
}

func (t *tx) componentRollbackFailed(c *Component) bool {
	for _, s := range RollbackSteps {
		if t.view.step(true, c.Name, s).Failed {
			return true
		}
	}
	return false
}

func (t *tx) runRollbackStep(ctx context.Context, c *Component, step string, attempt int) (json.RawMessage, error) {
	switch step {
	case StepRollback, StepRollbackHealth:
		return nil, t.runHook(ctx, c, step, hookOf(c, step), attempt)
	case StepRestoreFiles:
		return t.restoreFiles(c)
	case StepRestoreMaps:
		return t.restoreMaps(ctx, c, true)
	}
	return nil, fmt.Errorf("unknown step %s", step)
}

func (t *tx) snapshotDir(c *Component) string { return filepath.Join(t.dir, "snapshots", c.Name) }

// hookEnv is the environment a hook sees (F6).
func (t *tx) hookEnv(c *Component, step string, attempt int) []string {
	return []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
		"FLUXVM_TRANSACTION_ID=" + t.plan.TransactionID,
		"FLUXVM_TRANSACTION_DIR=" + t.dir,
		"FLUXVM_PLAN_SHA256=" + t.plan.SHA256,
		"FLUXVM_COMPONENT=" + c.Name,
		"FLUXVM_STEP=" + step,
		"FLUXVM_ATTEMPT=" + fmt.Sprint(attempt),
		"FLUXVM_SNAPSHOT_DIR=" + t.snapshotDir(c),
		"FLUXVM_BPFFS_ROOT=" + t.plan.BPFFSRoot,
		"FLUXVM_STATE_DIR=" + t.plan.StateDir,
	}
}

// hookOf returns the hook step runs for c, nil for a step that runs none.
func hookOf(c *Component, step string) *Hook {
	switch step {
	case StepPreflight:
		return c.Hooks.Preflight
	case StepApply:
		return c.Hooks.Apply
	case StepHealth:
		return c.Hooks.Health
	case StepRollback:
		return c.Hooks.Rollback
	case StepRollbackHealth:
		return c.Hooks.RollbackHealth
	}
	return nil
}

// createHookLog creates logs/<component>.<step>.<attempt>.log for a hook about to run.
func (t *tx) createHookLog(c *Component, step string, h *Hook, attempt int) (*hookLog, error) {
	logDir := filepath.Join(t.dir, "logs")
	if err := durable.MkdirAll(logDir, 0o700); err != nil {
		return nil, err
	}
	logPath := filepath.Join(logDir, fmt.Sprintf("%s.%s.%d.log", c.Name, step, attempt))
	return createHookLog(logPath, MaxHookOutput, t.e.now,
		fmt.Sprintf("# argv: %s\n# step: %s attempt %d\n# started: %s\n", argv.Quote(h.Argv), step, attempt, ts(t.e.now())))
}

// runHook runs one hook, streaming its output into its log (created by runStep before the step
// was journaled as started; timestamped lines, bounded), and syncs the log before returning,
// that is before the step's outcome is journaled.
func (t *tx) runHook(ctx context.Context, c *Component, step string, h *Hook, attempt int) error {
	if h == nil {
		return nil
	}
	hl := t.hookLog
	t.hookLog = nil
	if hl == nil {
		var err error
		if hl, err = t.createHookLog(c, step, h, attempt); err != nil {
			return fmt.Errorf("component %s: %s: %w", c.Name, step, err)
		}
	}
	res, runErr := t.e.Runner.Run(ctx, argv.Cmd{
		Argv:      h.Argv,
		Env:       t.hookEnv(c, step, attempt),
		Dir:       "/",
		Timeout:   h.Timeout,
		MaxOutput: MaxHookOutput,
		Stdout:    hl.stream("stdout"),
		Stderr:    hl.stream("stderr"),
	})
	footer := fmt.Sprintf("# exit code: %d  duration: %s  truncated: %v  timed out: %v\n",
		res.ExitCode, res.Duration.Round(time.Millisecond), res.Truncated || hl.truncated, res.TimedOut)
	if runErr != nil {
		footer += fmt.Sprintf("# error: %v\n", runErr)
	}
	if err := hl.finish(footer); err != nil {
		return fmt.Errorf("component %s: %s: %w", c.Name, step, err)
	}
	if runErr != nil {
		return fmt.Errorf("component %s: %s hook: %w", c.Name, step, runErr)
	}
	return nil
}

// MapReport is what happened to one map in a step.
type MapReport struct {
	Map      string                `json:"map"`
	Pin      string                `json:"pin"`
	Policy   bpfmap.Policy         `json:"policy"`
	Snapshot *bpfmap.SnapshotInfo  `json:"snapshot,omitempty"`
	Restore  *bpfmap.RestoreReport `json:"restore,omitempty"`
}

type snapshotDetail struct {
	Files []FileSnapshot `json:"files,omitempty"`
	Maps  []MapReport    `json:"maps,omitempty"`
}

func (t *tx) mapSnapshotPath(c *Component, m *Map) string {
	return filepath.Join(t.snapshotDir(c), "maps", m.Name+".snap")
}

// snapshot captures declared files and maps before apply (F12). Re-running it after a crash
// rewrites the same snapshot files: apply has not started, so the live state is still the old one.
func (t *tx) snapshot(ctx context.Context, c *Component) (json.RawMessage, error) {
	var d snapshotDetail
	if len(c.Files) > 0 {
		fs, err := snapshotFiles(filepath.Join(t.snapshotDir(c), "files"), c.Files)
		if err != nil {
			return nil, fmt.Errorf("component %s: %w", c.Name, err)
		}
		d.Files = fs
	}
	if len(c.Maps) > 0 {
		if err := durable.MkdirAll(filepath.Join(t.snapshotDir(c), "maps"), 0o700); err != nil {
			return nil, err
		}
	}
	for i := range c.Maps {
		m := &c.Maps[i]
		spec := t.plan.Spec(c, m)
		si, err := t.e.Store.Snapshot(ctx, spec, t.mapSnapshotPath(c, m), t.mapProgress(c, m, "snapshot"))
		if err != nil {
			return reportJSON(d), err // the store names component, map and pin
		}
		si.Path = relTo(t.dir, si.Path)
		d.Maps = append(d.Maps, MapReport{Map: m.Name, Pin: m.Pin, Policy: m.Policy, Snapshot: &si})
	}
	return reportJSON(d), nil
}

func (t *tx) mapProgress(c *Component, m *Map, what string) bpfmap.Progress {
	if t.e.Progress == nil {
		return nil
	}
	last := time.Time{}
	return func(done, total int64) {
		if time.Since(last) > 500*time.Millisecond || done == total {
			last = time.Now()
			t.e.progressf("%s: map %s: %s %d/%d entries", c.Name, m.Name, what, done, total)
		}
	}
}

// restoreMaps replays declared map state from the pre-apply snapshots (F10, F12) — the same
// restore on the success path and on rollback.
func (t *tx) restoreMaps(ctx context.Context, c *Component, rollback bool) (json.RawMessage, error) {
	var reps []MapReport
	var errs []error
	journaled, jerr := t.journaledSnapshot(c)
	for i := range c.Maps {
		m := &c.Maps[i]
		spec := t.plan.Spec(c, m)
		err := jerr
		if err == nil {
			spec.SnapshotSHA256, err = t.journaledMapSHA256(c, m, journaled)
		}
		if err != nil {
			errs = append(errs, err)
			if !rollback {
				break
			}
			continue
		}
		rep, err := t.e.Store.Restore(ctx, spec, t.mapSnapshotPath(c, m), t.mapProgress(c, m, "restore"))
		if err != nil {
			errs = append(errs, err) // the store names component, map and pin
			if !rollback {
				break
			}
			continue
		}
		reps = append(reps, MapReport{Map: m.Name, Pin: m.Pin, Policy: m.Policy, Restore: &rep})
	}
	return reportJSON(reps), errors.Join(errs...)
}

// journaledSnapshot is what the journal's record of the component's snapshot step says was
// captured. Restores trust a snapshot file only when it is exactly that one.
func (t *tx) journaledSnapshot(c *Component) (snapshotDetail, error) {
	var d snapshotDetail
	st := t.view.step(false, c.Name, StepSnapshot)
	if !st.Done {
		return d, fmt.Errorf("component %s: the journal records no completed snapshot; refusing to restore from files it does not vouch for", c.Name)
	}
	if err := json.Unmarshal(st.Detail, &d); err != nil {
		return d, fmt.Errorf("component %s: journaled snapshot record: %w", c.Name, err)
	}
	return d, nil
}

// journaledMapSHA256 is the sha256 the journal recorded for the map's snapshot file. The store
// restores only from a file with exactly that digest (bpfmap.Spec.SnapshotSHA256), so a corrupt
// file, or another valid snapshot swapped in its place, is refused before anything is written;
// it checks the digest while it reads the file, which is then read and hashed once.
func (t *tx) journaledMapSHA256(c *Component, m *Map, d snapshotDetail) (string, error) {
	for _, r := range d.Maps {
		if r.Map == m.Name && r.Snapshot != nil && r.Snapshot.SHA256 != "" {
			return r.Snapshot.SHA256, nil
		}
	}
	return "", fmt.Errorf("component %s: map %s: the journal records no snapshot of this map; refusing to restore %s",
		c.Name, m.Name, t.mapSnapshotPath(c, m))
}

func (t *tx) restoreFiles(c *Component) (json.RawMessage, error) {
	if len(c.Files) == 0 {
		return nil, nil
	}
	d, err := t.journaledSnapshot(c)
	if err != nil {
		return nil, err
	}
	fs, err := restoreFiles(filepath.Join(t.snapshotDir(c), "files"), c.Files, d.Files)
	if err != nil {
		return reportJSON(fs), fmt.Errorf("component %s: %w", c.Name, err)
	}
	return reportJSON(fs), nil
}

// reportJSON encodes a step's report for the journal. It never fails: a report that cannot
// be encoded is recorded as its encoding error's text, because the step's own outcome (the
// returned error) must not be lost to a reporting problem.
func reportJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(fmt.Sprintf("%q", err.Error()))
	}
	return b
}

func relTo(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

// finalize writes journal.final.json, EVIDENCE.sha256 and (with signing) the signature once the
// journal has its end record. It is idempotent: after a crash it simply runs again.
func (t *tx) finalize(ctx context.Context) error {
	if t.view.end == nil {
		return nil
	}
	evPath := filepath.Join(t.dir, evidence.ManifestFile)
	sigPath := filepath.Join(t.dir, evidence.SignatureFile)
	_, manErr := os.Stat(evPath)
	_, sigErr := os.Stat(sigPath)
	if manErr == nil && (t.plan.Signing == nil || sigErr == nil) {
		return nil
	}
	st := buildStatus(t.dir, t.view, t.plan.Components)
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(t.dir, FinalFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("transaction %s: %w", t.plan.TransactionID, err)
	}
	t.e.failpoint("final:" + FinalFile)
	if _, err := evidence.Write(t.dir); err != nil {
		return fmt.Errorf("transaction %s: %w", t.plan.TransactionID, err)
	}
	t.e.failpoint("final:" + evidence.ManifestFile)
	if s := t.plan.Signing; s != nil {
		signer := t.e.Signer
		if signer == nil {
			signer = evidence.SSHKeygen{Runner: t.e.Runner}
		}
		if err := signer.Sign(ctx, t.dir, s.SSHPrivateKey, s.Namespace); err != nil {
			return fmt.Errorf("transaction %s: sign evidence: %w", t.plan.TransactionID, err)
		}
	}
	return nil
}
