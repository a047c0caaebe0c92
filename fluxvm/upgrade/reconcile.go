package upgrade

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"zyvor.dev/sysbox/fluxvm/evidence"
	"zyvor.dev/sysbox/internal/durable"
)

// ReconcileResult says what reconcile did with one transaction directory.
type ReconcileResult struct {
	TransactionID string `json:"transaction_id"`
	Action        string `json:"action"` // rolled-back | skipped-terminal | skipped-locked | skipped-fresh | skipped-not-begun | error
	State         string `json:"state,omitempty"`
	Detail        string `json:"detail,omitempty"`
}

// Reconcile looks at every transaction under stateDir (F17): a running one whose journal made no
// progress for stale and whose lock is free is rolled back using the plan as begun; a locked one is
// left alone; a terminal one with unfinished evidence is finalized. A corrupt journal is reported,
// never acted on.
func (e *Engine) Reconcile(ctx context.Context, stateDir string, stale time.Duration) ([]ReconcileResult, error) {
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", stateDir, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	var out []ReconcileResult
	var errs []error
	for _, de := range ents {
		if !de.IsDir() || ValidTransactionID(de.Name()) != nil {
			continue
		}
		dir := filepath.Join(stateDir, de.Name())
		if _, err := os.Stat(filepath.Join(dir, JournalFile)); err != nil {
			continue
		}
		r := e.reconcileOne(ctx, stateDir, de.Name(), stale)
		if r.Action == "error" {
			errs = append(errs, fmt.Errorf("transaction %s: %s", r.TransactionID, r.Detail))
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

func (e *Engine) reconcileOne(ctx context.Context, stateDir, id string, stale time.Duration) ReconcileResult {
	r := ReconcileResult{TransactionID: id}
	dir := filepath.Join(stateDir, id)
	fail := func(err error) ReconcileResult {
		r.Action, r.Detail = "error", err.Error()
		return r
	}
	// Look before locking: most transactions are finished or fresh, and taking their lock (even
	// briefly) could make an operator's concurrent command fail at once.
	if evs, err := ReadJournal(dir); err == nil {
		v := replay(evs)
		if v.end != nil && finalized(dir) {
			r.Action, r.State = "skipped-terminal", v.end.State
			return r
		}
		if v.end == nil && v.begin != nil {
			if idle := e.now().Sub(v.lastTime); idle < stale {
				r.Action, r.State = "skipped-fresh", StateRunning
				r.Detail = fmt.Sprintf("last journal progress %s ago (stale after %s)", idle.Round(time.Second), stale)
				return r
			}
		}
	}
	p, err := LoadPlan(filepath.Join(dir, PlanFile))
	if err != nil {
		return fail(fmt.Errorf("plan as begun: %w", err))
	}
	if p.TransactionID != id {
		return fail(fmt.Errorf("plan as begun names transaction %q", p.TransactionID))
	}
	// The stored plan may name another state_dir (a moved directory); act on the one scanned.
	p.StateDir = stateDir
	t, err := e.open(p)
	if errors.Is(err, durable.ErrLocked) {
		r.Action, r.Detail = "skipped-locked", err.Error()
		return r
	}
	if err != nil {
		return fail(err)
	}
	defer t.close()
	if err := t.checkHash(); err != nil {
		return fail(err)
	}
	r.State = t.view.state()
	if t.view.end != nil {
		if err := t.finalize(ctx); err != nil {
			return fail(err)
		}
		r.Action = "skipped-terminal"
		return r
	}
	if t.view.begin == nil {
		r.Action, r.Detail = "skipped-not-begun", "journal has no begin record: nothing ran; run or resume the plan, or remove the directory"
		return r
	}
	idle := e.now().Sub(t.view.lastTime)
	if idle < stale {
		r.Action, r.Detail = "skipped-fresh", fmt.Sprintf("last journal progress %s ago (stale after %s)", idle.Round(time.Second), stale)
		return r
	}
	res, err := t.rollbackNow(ctx, fmt.Sprintf("reconcile: no journal progress for %s (stale after %s)", idle.Round(time.Second), stale))
	r.State = res.State
	if err != nil {
		return fail(err)
	}
	r.Action = "rolled-back"
	if res.State != StateRolledBack {
		r.Detail = res.Reason
	}
	return r
}

// finalized reports whether a terminal transaction's evidence is complete (the signature too when
// the plan as begun asks for one).
func finalized(dir string) bool {
	if _, err := os.Lstat(filepath.Join(dir, FinalFile)); err != nil {
		return false
	}
	if _, err := os.Lstat(filepath.Join(dir, evidence.ManifestFile)); err != nil {
		return false
	}
	p, err := LoadPlan(filepath.Join(dir, PlanFile))
	if err != nil {
		return false
	}
	if p.Signing != nil {
		if _, err := os.Lstat(filepath.Join(dir, evidence.SignatureFile)); err != nil {
			return false
		}
	}
	return true
}
