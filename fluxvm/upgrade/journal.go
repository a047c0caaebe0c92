package upgrade

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"zyvor.dev/sysbox/internal/durable"
)

// Journal record format.
const (
	journalKind    = "fluxvm-upgrade-journal"
	journalVersion = 1
	JournalFile    = "journal.log"
	FinalFile      = "journal.final.json"
	PlanFile       = "plan.json"
)

// Event types.
const (
	EvBegin         = "begin"
	EvStepStart     = "step-start"
	EvStepDone      = "step-done"
	EvStepFailed    = "step-failed"
	EvRollbackBegin = "rollback-begin"
	EvEnd           = "end"
	// EvJournalRepaired records that a torn tail was dropped (its bytes kept beside the journal).
	EvJournalRepaired = "journal-repaired"
	// EvRollbackRetry reopens a manual-intervention transaction: its failed rollback steps (and
	// only those, with the steps they held back) run again. The failed attempts stay journaled.
	EvRollbackRetry = "rollback-retry"
)

// Forward and rollback steps, in order (F12, F13).
const (
	StepPreflight      = "preflight"
	StepSnapshot       = "snapshot"
	StepApply          = "apply"
	StepRestore        = "restore"
	StepHealth         = "health"
	StepRollback       = "rollback"
	StepRestoreFiles   = "restore-files"
	StepRestoreMaps    = "restore-maps"
	StepRollbackHealth = "rollback-health"
)

var (
	ForwardSteps  = []string{StepPreflight, StepSnapshot, StepApply, StepRestore, StepHealth}
	RollbackSteps = []string{StepRollback, StepRestoreFiles, StepRestoreMaps, StepRollbackHealth}
)

// Terminal and running states.
const (
	StateRunning            = "running"
	StateCommitted          = "committed"
	StateRolledBack         = "rolled-back"
	StateManualIntervention = "manual-intervention"
)

// Event is one journal record. A step is acknowledged only once its record is synced.
type Event struct {
	Seq       int             `json:"seq"`
	Time      time.Time       `json:"time"`
	Type      string          `json:"type"`
	Component string          `json:"component,omitempty"`
	Step      string          `json:"step,omitempty"`
	Attempt   int             `json:"attempt,omitempty"`
	Error     string          `json:"error,omitempty"`
	Detail    json.RawMessage `json:"detail,omitempty"`

	// begin
	TransactionID string   `json:"transaction_id,omitempty"`
	PlanSHA256    string   `json:"plan_sha256,omitempty"`
	ToolVersion   string   `json:"tool_version,omitempty"`
	Components    []string `json:"components,omitempty"`

	// rollback-begin, end
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Key names the record for failpoints and tests: "begin", "step-start:web:apply",
// "rollback-begin", "end".
func (e Event) Key() string {
	switch e.Type {
	case EvStepStart, EvStepDone, EvStepFailed:
		return e.Type + ":" + e.Component + ":" + e.Step
	}
	return e.Type
}

// ErrJournalCorrupt marks a journal that cannot be trusted (torn tail, bad checksum, gap).
var ErrJournalCorrupt = errors.New("journal is corrupt; not trusting it")

// ReadJournal returns every record of the transaction directory's journal. A torn or corrupt
// journal is an error wrapping ErrJournalCorrupt and durable.ErrCorrupt.
func ReadJournal(txDir string) ([]Event, error) {
	evs, _, err := readJournal(txDir)
	return evs, err
}

func readJournal(txDir string) ([]Event, durable.LogInfo, error) {
	evs, info, _, err := readJournalData(txDir)
	return evs, info, err
}

// readJournalData is readJournal that also returns the bytes it read (nil for no journal).
func readJournalData(txDir string) ([]Event, durable.LogInfo, []byte, error) {
	path := filepath.Join(txDir, JournalFile)
	// The journal is never read through a symlink, nor from a FIFO or device put in its place;
	// it is opened once and that descriptor is what is read, so nothing can be swapped in between.
	f, err := durable.OpenRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, durable.LogInfo{}, nil, nil
	}
	if err != nil {
		return nil, durable.LogInfo{}, nil, fmt.Errorf("%w: %s: %w", ErrJournalCorrupt, path, err)
	}
	data, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return nil, durable.LogInfo{}, nil, fmt.Errorf("%w: read %s: %w", ErrJournalCorrupt, path, err)
	}
	var evs []Event
	info, err := durable.ReadLogFrom(bytes.NewReader(data), path, journalKind, journalVersion, func(_ int, raw json.RawMessage) error {
		var ev Event
		if err := json.Unmarshal(raw, &ev); err != nil {
			return err
		}
		if ev.Seq != len(evs)+1 {
			return fmt.Errorf("sequence %d, want %d", ev.Seq, len(evs)+1)
		}
		if err := checkEventOrder(evs, ev); err != nil {
			return err
		}
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		if torn, n := tornTail(data, info); torn {
			err = fmt.Errorf("%w (the last %d bytes are an unterminated record that was never acknowledged; resume or rollback with --repair-torn-tail drops it, keeping a copy)", err, n)
		}
		return evs, info, data, fmt.Errorf("%w: %w", ErrJournalCorrupt, err)
	}
	return evs, info, data, nil
}

// checkEventOrder refuses a record that no run of the engine writes at that point: the begin
// record is the first and only one (a second begin could carry another plan hash that replay
// would trust), and nothing but a journal repair follows the end record.
func checkEventOrder(prev []Event, ev Event) error {
	switch ev.Type {
	case EvBegin, EvStepStart, EvStepDone, EvStepFailed, EvRollbackBegin, EvEnd, EvJournalRepaired, EvRollbackRetry:
	default:
		return fmt.Errorf("record %d: unknown type %q", ev.Seq, ev.Type)
	}
	if len(prev) == 0 {
		if ev.Type != EvBegin && ev.Type != EvJournalRepaired {
			return fmt.Errorf("record 1 is %q, want %q", ev.Type, EvBegin)
		}
		return nil
	}
	var begun bool
	var end *Event // the last end record not reopened by a retry
	for i := range prev {
		switch prev[i].Type {
		case EvBegin:
			begun = true
		case EvEnd:
			end = &prev[i]
		case EvRollbackRetry:
			end = nil
		}
	}
	switch {
	case ev.Type == EvBegin && begun:
		return fmt.Errorf("record %d: a second %q record (plan sha256 %s)", ev.Seq, EvBegin, ev.PlanSHA256)
	case ev.Type != EvBegin && ev.Type != EvJournalRepaired && !begun:
		return fmt.Errorf("record %d: %q before the %q record", ev.Seq, ev.Type, EvBegin)
	case ev.Type == EvRollbackRetry && (end == nil || end.State != StateManualIntervention):
		return fmt.Errorf("record %d: %q of a transaction that did not end in %s", ev.Seq, ev.Type, StateManualIntervention)
	case end != nil && ev.Type != EvJournalRepaired && ev.Type != EvRollbackRetry:
		return fmt.Errorf("record %d: %q after the %q record", ev.Seq, ev.Type, EvEnd)
	}
	return nil
}

// tornTail reports whether everything of data after the valid prefix is one unterminated line:
// an append that never returned, so the step it announced was never acknowledged or acted on.
func tornTail(data []byte, info durable.LogInfo) (bool, int) {
	if int64(len(data)) <= info.Size {
		return false, 0
	}
	tail := data[info.Size:]
	return !bytes.Contains(tail, []byte{'\n'}), len(tail)
}

// repairTornTail keeps the torn bytes in journal.torn-<offset> and truncates the journal to its
// valid prefix, durably. It refuses anything but a torn tail. The caller holds the lock.
func repairTornTail(txDir string) (int, error) {
	path := filepath.Join(txDir, JournalFile)
	_, info, data, err := readJournalData(txDir)
	if err == nil {
		return 0, nil
	}
	torn, n := tornTail(data, info)
	if !torn {
		return 0, err // corruption inside the journal: never repaired
	}
	keep := filepath.Join(txDir, fmt.Sprintf("journal.torn-%d", info.Size))
	if err := durable.WriteFile(keep, data[info.Size:], 0o600); err != nil {
		return 0, err
	}
	// O_NOFOLLOW again: the file truncated is never one a symlink points at.
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(data)) {
		return 0, fmt.Errorf("%w: %s changed while it was being repaired", ErrJournalCorrupt, path)
	}
	if err := f.Truncate(info.Size); err != nil {
		return 0, fmt.Errorf("truncate %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("fsync %s: %w", path, err)
	}
	return n, nil
}

// stepKey identifies a step of a component in one phase.
type stepKey struct {
	rollback  bool
	component string
	step      string
}

// stepStatus is what the journal says about one step.
type stepStatus struct {
	Attempts int
	Started  time.Time
	Finished time.Time
	Done     bool
	Failed   bool
	Error    string
	Detail   json.RawMessage
}

func (s *stepStatus) inDoubt() bool { return s.Attempts > 0 && !s.Done && !s.Failed }

// txView is the transaction as the journal describes it.
type txView struct {
	events       []Event
	begin        *Event
	rollback     *Event
	end          *Event
	steps        map[stepKey]*stepStatus
	lastTime     time.Time
	firstFailure string
	retries      int // rollback-retry records
}

func replay(evs []Event) *txView {
	v := &txView{events: evs, steps: map[stepKey]*stepStatus{}}
	for i := range evs {
		ev := &evs[i]
		v.lastTime = ev.Time
		switch ev.Type {
		case EvBegin:
			v.begin = ev
		case EvRollbackBegin:
			v.rollback = ev
		case EvEnd:
			v.end = ev
		case EvRollbackRetry:
			// Failed rollback steps run again; their attempts count on, so each attempt keeps
			// its own log, and the failed records stay in the journal.
			v.end = nil
			v.retries++
			for k, st := range v.steps {
				if k.rollback && st.Failed {
					st.Failed, st.Error, st.Finished = false, "", time.Time{}
				}
			}
		case EvStepStart, EvStepDone, EvStepFailed:
			k := stepKey{rollback: v.rollback != nil, component: ev.Component, step: ev.Step}
			s := v.steps[k]
			if s == nil {
				s = &stepStatus{}
				v.steps[k] = s
			}
			switch ev.Type {
			case EvStepStart:
				s.Attempts++
				s.Started, s.Done, s.Failed, s.Error, s.Finished = ev.Time, false, false, "", time.Time{}
			case EvStepDone:
				s.Done, s.Finished, s.Detail = true, ev.Time, ev.Detail
			case EvStepFailed:
				s.Failed, s.Finished, s.Error, s.Detail = true, ev.Time, ev.Error, ev.Detail
				if v.firstFailure == "" && v.rollback == nil {
					v.firstFailure = fmt.Sprintf("component %s: %s: %s", ev.Component, ev.Step, ev.Error)
				}
			}
		}
	}
	return v
}

func (v *txView) step(rollback bool, component, step string) *stepStatus {
	if s := v.steps[stepKey{rollback, component, step}]; s != nil {
		return s
	}
	return &stepStatus{}
}

// state is the transaction's state by the journal.
func (v *txView) state() string {
	if v.end != nil {
		return v.end.State
	}
	return StateRunning
}
