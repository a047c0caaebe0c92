package executor

import (
	"context"
	"errors"
	"fmt"
	"zyvor.dev/sysbox/internal/plans"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/states"
)

// RecoverReport says what recovery found and did.
type RecoverReport struct {
	Nothing     bool        `json:"nothing"` // no interrupted run: nothing was done
	Run         string      `json:"run,omitempty"`
	Command     string      `json:"command,omitempty"`
	Fingerprint string      `json:"fingerprint,omitempty"`
	TornTail    bool        `json:"torn_tail,omitempty"`
	Ops         []OpOutcome `json:"operations,omitempty"`
	Serial      uint64      `json:"serial"`
}

// OpOutcome is one interrupted operation's fate.
type OpOutcome struct {
	Addr    string       `json:"address"`
	Op      plans.Action `json:"action"`
	From    Step         `json:"from_step"`
	Outcome string       `json:"outcome"` // completed | was-complete | was-failed | failed
	Error   string       `json:"error,omitempty"`
}

// Recover finishes an interrupted run (S14):
//
//  1. verify that the checkpoint belongs to this topology (state lineage), that every record
//     carries the run's plan fingerprint, and that the state was not rolled back behind the run;
//  2. read the checkpoint — progress is never inferred from log text;
//  3. observe through the driver what each recorded handle names;
//  4. adopt what is there, continue the remaining substeps, clean up what was to be removed;
//  5. save the state by CAS, then finish old-generation cleanup.
//
// An Unknown observation or an unavailable driver stops recovery with an error and leaves the
// checkpoint in place. Running Recover again after it succeeded finds nothing and changes
// nothing.
func (e *Executor) Recover(ctx context.Context) (*RecoverReport, error) {
	unlock, err := e.State.Lock(ctx, "recover")
	if err != nil {
		return nil, err
	}
	s := &session{e: e, unlock: unlock}
	defer s.close()
	if err := s.read(ctx); err != nil {
		return nil, err
	}
	it, err := ReadLog(e.Dir)
	if err != nil {
		return nil, err
	}
	if it == nil {
		return &RecoverReport{Nothing: true, Serial: s.st.Serial}, nil
	}
	return e.recoverLocked(ctx, s, it)
}

// ErrForeignCheckpoint is wrapped when a checkpoint does not belong to the state at hand.
var ErrForeignCheckpoint = errors.New("checkpoint does not belong to this state")

func (e *Executor) recoverLocked(ctx context.Context, s *session, it *Interrupted) (*RecoverReport, error) {
	h := it.Header
	rep := &RecoverReport{Run: h.Run, Command: h.Command, Fingerprint: h.Fingerprint, TornTail: it.TornTail, Serial: s.st.Serial}
	if h.Run == "" || it.Finished {
		// Header never became durable (no step ran) or the run finished: only the file is left.
		if len(it.Ops) > 0 && h.Run == "" {
			return rep, fmt.Errorf("checkpoint %s: %w: operations without a run header", it.Path, durable.ErrCorrupt)
		}
		if it.Finished {
			for _, op := range it.Ops {
				rep.Ops = append(rep.Ops, OpOutcome{Addr: op.Addr, Op: op.Op, From: op.Step, Outcome: outcomeOf(op.Step)})
			}
		}
		return rep, removeLog(it.Path)
	}
	// Step 1: topology, lineage, fingerprint.
	if err := checkBelongs(it, s.st); err != nil {
		return rep, err
	}
	// The drivers the unfinished operations need must be there, before any provider call (a
	// missing driver is not the operation's failure: the checkpoint is kept).
	var pending []Action
	for _, op := range it.Ops {
		if !op.Step.Terminal() {
			pending = append(pending, op.Action)
		}
	}
	if err := e.Check(pending); err != nil {
		return rep, fmt.Errorf("recovery needs drivers this sysbox does not provide; the checkpoint is kept: %w", err)
	}
	// Steps 2–5: continue every unfinished operation from its checkpointed step.
	log, err := reopenLog(it, e.AfterDurable)
	if err != nil {
		return rep, err
	}
	log.notify = e.Checkpointed
	if e.logOpened != nil {
		e.logOpened(log)
	}
	r := &run{e: e, log: log, sv: newSaver(e.State, s.st, e.now, e.AfterDurable), lineage: h.Lineage, fingerprint: h.Fingerprint, recovering: true}
	actions := make([]Action, len(it.Ops))
	ops := make([]*OpState, len(it.Ops))
	from := make([]Step, len(it.Ops))
	for i, op := range it.Ops {
		actions[i] = op.Action
		from[i] = op.Step
		if !op.Step.Terminal() {
			ops[i] = op
		}
	}
	failed := r.walk(ctx, actions, ops)
	r.sv.hurry()
	r.pending.Wait()
	rep.Ops = append(rep.Ops, outcomes(it.Ops, from)...)
	rep.Serial = r.sv.serial()
	if r.fatal != nil || r.unfinished(ops) {
		log.Close()
		err := errors.Join(failed...)
		if r.fatal != nil {
			err = errors.Join(r.fatal, err)
		}
		return rep, fmt.Errorf("recovery stopped; the checkpoint is kept, fix the cause and run `sysbox recover` again: %w", err)
	}
	if err := log.Finish(); err != nil {
		return rep, err
	}
	if len(failed) > 0 {
		return rep, fmt.Errorf("recovery finished the run, but some operations failed (state records what exists): %w", errors.Join(failed...))
	}
	return rep, nil
}

// checkBelongs refuses a checkpoint written for another state (lineage), for an older state
// than the one at hand, or whose records disagree with its header or are invalid.
func checkBelongs(it *Interrupted, st *states.State) error {
	h := it.Header
	if h.Lineage != st.Lineage {
		return fmt.Errorf("checkpoint %s (run %s): %w: it was written for state lineage %s, the state has lineage %s; refusing to act on it",
			it.Path, h.Run, ErrForeignCheckpoint, h.Lineage, st.Lineage)
	}
	if st.Serial < h.Serial {
		return fmt.Errorf("checkpoint %s (run %s): %w: the run started at state serial %d but the state is at serial %d (restored from an older copy?)",
			it.Path, h.Run, ErrForeignCheckpoint, h.Serial, st.Serial)
	}
	for _, op := range it.Ops {
		if op.Fingerprint != h.Fingerprint {
			return fmt.Errorf("checkpoint %s: %s: %w: plan fingerprint %q differs from the run's %q",
				it.Path, op.Addr, durable.ErrCorrupt, op.Fingerprint, h.Fingerprint)
		}
		if err := op.Action.validate(); err != nil {
			return fmt.Errorf("checkpoint %s: %w: %w", it.Path, durable.ErrCorrupt, err)
		}
	}
	return nil
}

// outcomes reports each recovered operation: where it was (from) and where it ended.
func outcomes(ops []*OpState, from []Step) []OpOutcome {
	out := make([]OpOutcome, 0, len(ops))
	for i, op := range ops {
		o := OpOutcome{Addr: op.Addr, Op: op.Op, From: from[i]}
		switch {
		case from[i] == StepDone:
			o.Outcome = "was-complete"
		case from[i] == StepFailed:
			o.Outcome, o.Error = "was-failed", op.Error
		case op.Step == StepDone:
			o.Outcome = "completed"
		default:
			o.Outcome, o.Error = "failed", op.Error
		}
		out = append(out, o)
	}
	return out
}

func outcomeOf(s Step) string {
	if s == StepFailed {
		return "was-failed"
	}
	return "was-complete"
}

// unfinished reports whether a checkpointed operation is neither done nor failed.
func (r *run) unfinished(ops []*OpState) bool {
	for _, op := range ops {
		if op != nil && op.written && !op.Step.Terminal() {
			return true
		}
	}
	return false
}
