package upgrade

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"zyvor.dev/sysbox/fluxvm/evidence"
)

// Status is the `status --json` object and the content of journal.final.json.
type Status struct {
	FormatVersion int               `json:"format_version"`
	ToolVersion   string            `json:"tool_version,omitempty"`
	TransactionID string            `json:"transaction_id"`
	PlanSHA256    string            `json:"plan_sha256"`
	State         string            `json:"state"`
	Phase         string            `json:"phase"` // forward | rolling-back | done
	Reason        string            `json:"reason,omitempty"`
	BeganAt       string            `json:"began_at,omitempty"`
	UpdatedAt     string            `json:"updated_at,omitempty"`
	EndedAt       string            `json:"ended_at,omitempty"`
	Records       int               `json:"journal_records"`
	Components    []ComponentStatus `json:"components"`
	Evidence      *EvidenceStatus   `json:"evidence,omitempty"`
}

// ComponentStatus lists a component's steps in execution order.
type ComponentStatus struct {
	Name  string       `json:"name"`
	Steps []StepStatus `json:"steps"`
}

// StepStatus is one step's outcome: pending, running (started, not finished — in doubt after a
// crash), done, failed or skipped.
type StepStatus struct {
	Step       string          `json:"step"`
	Phase      string          `json:"phase"` // forward | rollback
	Outcome    string          `json:"outcome"`
	Attempts   int             `json:"attempts,omitempty"`
	StartedAt  string          `json:"started_at,omitempty"`
	FinishedAt string          `json:"finished_at,omitempty"`
	Error      string          `json:"error,omitempty"`
	Detail     json.RawMessage `json:"detail,omitempty"`
}

// EvidenceStatus says whether the evidence files are present (not whether they verify).
// State is "complete" (terminal, manifest and, when the plan signs, signature written),
// "pending" (terminal, but finalization has not finished: resume or reconcile writes it) or
// "none" (the transaction is still running).
type EvidenceStatus struct {
	Manifest  bool   `json:"manifest"`
	Signature bool   `json:"signature"`
	State     string `json:"state"`
}

// Evidence states.
const (
	EvidenceComplete = "complete"
	EvidencePending  = "pending"
	EvidenceNone     = "none"
)

// EvidencePending reports a terminal transaction whose evidence is not (fully) written.
func (s *Status) EvidencePending() bool {
	return s.Evidence != nil && s.Evidence.State == EvidencePending
}

func ts(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") // RFC 3339, millisecond precision
}

// buildStatus derives the status from the journal. It is deterministic in the journal, so
// journal.final.json is the same however often finalization runs.
func buildStatus(dir string, v *txView, comps []Component) *Status {
	s := &Status{FormatVersion: 1, State: v.state(), Records: len(v.events), Components: []ComponentStatus{}}
	switch {
	case v.end != nil:
		s.Phase, s.Reason, s.EndedAt = "done", v.end.Reason, ts(v.end.Time)
	case v.rollback != nil:
		s.Phase, s.Reason = "rolling-back", v.rollback.Reason
	default:
		s.Phase = "forward"
	}
	if v.begin != nil {
		s.TransactionID, s.PlanSHA256, s.BeganAt, s.ToolVersion = v.begin.TransactionID, v.begin.PlanSHA256, ts(v.begin.Time), v.begin.ToolVersion
	}
	s.UpdatedAt = ts(v.lastTime)
	for _, c := range comps {
		cs := ComponentStatus{Name: c.Name}
		for _, phase := range []bool{false, true} {
			steps := ForwardSteps
			if phase {
				steps = RollbackSteps
			}
			for _, step := range steps {
				st, ok := v.steps[stepKey{phase, c.Name, step}]
				if phase && !ok {
					continue // rollback steps are listed only once they ran
				}
				ss := StepStatus{Step: step, Phase: "forward", Outcome: "pending"}
				if phase {
					ss.Phase = "rollback"
				}
				if ok {
					ss.Attempts, ss.StartedAt, ss.FinishedAt, ss.Error, ss.Detail = st.Attempts, ts(st.Started), ts(st.Finished), st.Error, st.Detail
					switch {
					case st.Done:
						ss.Outcome = "done"
					case st.Failed:
						ss.Outcome = "failed"
					default:
						ss.Outcome = "running"
					}
				} else if v.end != nil || v.rollback != nil {
					ss.Outcome = "skipped"
				}
				cs.Steps = append(cs.Steps, ss)
			}
		}
		s.Components = append(s.Components, cs)
	}
	if v.begin != nil && len(comps) == 0 {
		for _, n := range v.begin.Components {
			s.Components = append(s.Components, ComponentStatus{Name: n})
		}
	}
	return s
}

// ReadStatus reads a transaction directory (journal and the plan as begun). A corrupt journal is
// an error wrapping ErrJournalCorrupt.
func ReadStatus(txDir string) (*Status, error) {
	if fi, err := os.Stat(txDir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", txDir, ErrNoTransaction)
	} else if err != nil {
		return nil, fmt.Errorf("transaction directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("transaction directory %s: not a directory", txDir)
	}
	if _, err := os.Lstat(filepath.Join(txDir, JournalFile)); errors.Is(err, fs.ErrNotExist) {
		if err := checkNoStateWithoutJournal(txDir); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", txDir, ErrNoTransaction)
	}
	evs, err := ReadJournal(txDir)
	for i := 0; err != nil && i < 3; i++ {
		// A live writer may be mid-append: a torn tail that heals within moments is not corruption.
		time.Sleep(50 * time.Millisecond)
		evs, err = ReadJournal(txDir)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", txDir, err)
	}
	v := replay(evs)
	if v.begin == nil {
		if err := checkNoStateWithoutJournal(txDir); err != nil {
			return nil, err
		}
	}
	var comps []Component
	if p, err := LoadPlan(filepath.Join(txDir, PlanFile)); err == nil {
		comps = p.Components
	}
	s := buildStatus(txDir, v, comps)
	_, manErr := os.Lstat(filepath.Join(txDir, evidence.ManifestFile))
	_, sigErr := os.Lstat(filepath.Join(txDir, evidence.SignatureFile))
	s.Evidence = &EvidenceStatus{Manifest: manErr == nil, Signature: sigErr == nil, State: EvidenceNone}
	if v.end != nil {
		s.Evidence.State = EvidencePending
		if finalized(txDir) {
			s.Evidence.State = EvidenceComplete
		}
	}
	return s, nil
}

// Summary is one line of a state directory listing.
type Summary struct {
	TransactionID string `json:"transaction_id"`
	State         string `json:"state,omitempty"`
	Phase         string `json:"phase,omitempty"`
	UpdatedAt     string `json:"updated_at,omitempty"`
	Reason        string `json:"reason,omitempty"`
	Error         string `json:"error,omitempty"` // e.g. a corrupt journal
}

// ListStatus summarizes every transaction directory under stateDir, sorted by id.
func ListStatus(stateDir string) ([]Summary, error) {
	ents, err := os.ReadDir(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return []Summary{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state dir %s: %w", stateDir, err)
	}
	out := []Summary{}
	for _, de := range ents {
		if !de.IsDir() || ValidTransactionID(de.Name()) != nil {
			continue
		}
		dir := filepath.Join(stateDir, de.Name())
		if _, err := os.Stat(filepath.Join(dir, JournalFile)); err != nil {
			continue
		}
		s := Summary{TransactionID: de.Name()}
		st, err := ReadStatus(dir)
		if err != nil {
			s.Error = err.Error()
		} else {
			s.State, s.Phase, s.UpdatedAt, s.Reason = st.State, st.Phase, st.UpdatedAt, st.Reason
		}
		out = append(out, s)
	}
	return out, nil
}
