package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
	"zyvor.dev/sysbox/internal/plans"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

const (
	checkpointKind    = "sysbox-checkpoint"
	checkpointVersion = 1
	// CheckpointFile is the name of the active run's checkpoint log in the checkpoint directory.
	CheckpointFile = "checkpoint.log"
)

// Step is a completed substep of an operation. Steps of one operation only move forward.
type Step string

const (
	StepBegin       Step = "begin"             // intent recorded; nothing done yet
	StepVerified    Step = "baseline-verified" // reset: baseline digest re-verified
	StepDetached    Step = "detached"          // delete: prior attachments detached
	StepDeleted     Step = "deleted"           // delete/replace: prior object gone
	StepCreated     Step = "created"           // Handle known
	StepAttached    Step = "attached"          // one more attachment wired (see Attachments)
	StepWired       Step = "wired"             // guest network and routes configured
	StepStarted     Step = "started"
	StepApplied     Step = "applied"     // policy installed and read back
	StepObserved    Step = "observed"    // new object observed present
	StepProvisioned Step = "provisioned" // provisioners ran
	StepReapplied   Step = "reapplied"   // reset: impacted policies re-installed on the new generation
	StepStateSaved  Step = "state-saved" // state CAS-saved with the result
	StepCleaned     Step = "prior-cleaned"
	StepDone        Step = "done"
	StepFailed      Step = "failed" // terminal: the error is in Error, state records what exists
)

var stepRank = map[Step]int{
	StepBegin: 0, StepVerified: 1, StepDetached: 2, StepDeleted: 3, StepCreated: 4, StepAttached: 5,
	StepWired: 6, StepStarted: 7, StepApplied: 8, StepObserved: 9, StepProvisioning: 9, StepProvisioned: 10, StepReapplied: 11,
	StepStateSaved: 12, StepCleaned: 13, StepDone: 14, StepFailed: 14,
}

func (s Step) atLeast(o Step) bool { return stepRank[s] >= stepRank[o] }

// Terminal reports whether the operation needs nothing more.
func (s Step) Terminal() bool { return s == StepDone || s == StepFailed }

// RunHeader is the first record of a checkpoint log.
type RunHeader struct {
	Run         string    `json:"run"`
	Command     string    `json:"command"` // apply | destroy | reset
	Lineage     string    `json:"lineage"`
	Serial      uint64    `json:"serial"` // state serial when the run started
	Fingerprint string    `json:"fingerprint,omitempty"`
	Started     time.Time `json:"started"`
}

// OpState is everything known about one operation; each checkpoint record carries it whole,
// so the latest record of an address is the operation's truth.
type OpState struct {
	Addr        string                      `json:"address"`
	Op          plans.Action                `json:"action"`
	Step        Step                        `json:"step"`
	Fingerprint string                      `json:"fingerprint,omitempty"`
	Action      Action                      `json:"desired"`
	Owner       substrate.Owner             `json:"owner"` // of the object being created
	Handle      *substrate.Handle           `json:"handle,omitempty"`
	Attachments []substrate.AttachmentState `json:"attachments,omitempty"`
	// Prior is the object being deleted, replaced or reset, as state recorded it.
	Prior *PriorObject `json:"prior,omitempty"`
	// Policies re-installed on a reset node's new generation, by policy address.
	Policies map[string]substrate.Handle `json:"policies,omitempty"`
	// Impacted are the desired policies a reset re-installs on the node's new generation.
	Impacted []Action                    `json:"impacted,omitempty"`
	Artifact *substrate.ArtifactIdentity `json:"artifact_identity,omitempty"`
	Error    string                      `json:"error,omitempty"`

	written bool      // at least one record of this operation is durable
	started time.Time // when this process started working on it (progress only)
}

// syncedBefore reports whether op's record of its current step is fsynced before the operation
// goes on. Every record is, except these progress markers, which are written (write(2): a
// killed process keeps them) and made durable by the next fsync of the log (any operation's
// next record that is synced, or the run's end); a power loss may lose them, and recovery then
// redoes what they marked, idempotently (see the package documentation). Since the log is
// always a prefix of what was written, a lost marker never hides a step of another operation
// that was guarded by a synced record written after it.
//   - StepWired: ConfigureGuestNetwork ran. Recovery from StepAttached configures again
//     (idempotent by contract) before anything that needs the guest network.
//   - StepStarted: the node was started. Recovery starts every node it continues again
//     (StartNode is idempotent and recovery never trusts this record).
//   - StepDeleted of a delete (not of a replace, where it guards creating the new
//     generation): only the state save and StepDone follow. Recovery from the step before
//     deletes again, and "already gone" counts as done (as after a crash right after the
//     deletion).
//   - StepDone: written after the state save that includes the result, so state holds the
//     object; recovery from the step before observes, adopts and saves it again.
func syncedBefore(op *OpState) bool {
	switch op.Step {
	case StepWired, StepStarted, StepDone:
		return false
	case StepDeleted:
		return op.Op != plans.Delete
	}
	return true
}

// PriorObject is the existing object an operation removes.
type PriorObject struct {
	Owner       substrate.Owner             `json:"owner"`
	Handle      substrate.Handle            `json:"handle"`
	Attachments []substrate.AttachmentState `json:"attachments,omitempty"`
	// Node is the handle of the node a prior policy lives in.
	Node *substrate.Handle `json:"node,omitempty"`
}

// record is one line of the log.
type record struct {
	Type   string     `json:"type"` // run | op | end
	Seq    uint64     `json:"seq"`
	At     time.Time  `json:"at"`
	Header *RunHeader `json:"header,omitempty"`
	Op     *OpState   `json:"op,omitempty"`
}

// Record is one durable checkpoint record as a reader outside recovery sees it: its number in
// the log, when it was written, and what it says — a run began ("run": Run, Command), an
// operation reached a step ("op": Address, Action, Step), the run ended ("end"). It carries
// nothing else of the operation (no desired spec, handles, owner anchors or error text), so it
// may be shown anywhere (the web view).
type Record struct {
	Seq     uint64       `json:"seq"`
	At      time.Time    `json:"at"`
	Type    string       `json:"type"`
	Run     string       `json:"run,omitempty"`
	Command string       `json:"command,omitempty"`
	Address string       `json:"address,omitempty"`
	Action  plans.Action `json:"action,omitempty"`
	Step    Step         `json:"step,omitempty"`
}

func (r record) summary(seq uint64) Record {
	out := Record{Seq: seq, At: r.At, Type: r.Type}
	if r.Header != nil {
		out.Run, out.Command = r.Header.Run, r.Header.Command
	}
	if r.Op != nil {
		out.Address, out.Action, out.Step = r.Op.Addr, r.Op.Op, r.Op.Step
	}
	return out
}

// Log is the active run's checkpoint log: a durable.Log (group commit, one repair rule) of
// checkpoint records.
type Log struct {
	dl     *durable.Log
	after  func(point string) // Executor.AfterDurable
	notify func(Record)       // Executor.Checkpointed
}

// Stats reports how many records and fsyncs a log has done (for benchmarks).
type Stats = durable.LogStats

// CreateLog starts a new checkpoint log in dir with h as its first record. An existing log
// (an interrupted run) is an error: recover first.
func CreateLog(dir string, h RunHeader, after func(point string)) (*Log, error) {
	return createLog(dir, h, after, nil)
}

// createLog is CreateLog that also tells notify of each durable record, the header included.
func createLog(dir string, h RunHeader, after func(point string), notify func(Record)) (*Log, error) {
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	path := filepath.Join(dir, CheckpointFile)
	dl, err := durable.Create(path)
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("checkpoint %s: %w", path, ErrInterrupted)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	l := &Log{dl: dl, after: after, notify: notify}
	if err := l.write(record{Type: "run", Header: &h}, true); err != nil {
		dl.Close()
		return nil, err
	}
	return l, nil
}

// reopenLog continues an interrupted run's log (recovery appends to it, so that a crash during
// recovery is recoverable too). An incomplete final record, never acknowledged, is cut off.
func reopenLog(it *Interrupted, after func(point string)) (*Log, error) {
	dl, _, err := durable.Open(it.Path, checkpointKind, checkpointVersion, nil)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	return &Log{dl: dl, after: after}, nil
}

// Path is the log's file path.
func (l *Log) Path() string { return l.dl.Path() }

// Stats returns counters.
func (l *Log) Stats() Stats { return l.dl.Stats() }

// Checkpoint records op (a copy is taken). Unless op's step is a progress marker (see
// syncedBefore), it returns after the record is fsynced; a marker is written and returns at
// once, durable with the log's next fsync.
func (l *Log) Checkpoint(op *OpState) error {
	c := *op
	return l.write(record{Type: "op", Op: &c}, syncedBefore(op))
}

// write numbers, stamps and appends r (the payload keeps its own seq, as the format always
// had), durably when sync.
func (l *Log) write(r record, sync bool) error {
	build := func(seq uint64) any {
		r.Seq = seq
		r.At = time.Now().UTC()
		return r
	}
	var err error
	if sync {
		err = l.dl.AppendSeq(checkpointKind, checkpointVersion, build)
	} else {
		err = l.dl.AppendSeqNoSync(checkpointKind, checkpointVersion, build)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if l.notify != nil {
		l.notify(r.summary(r.Seq))
	}
	if l.after != nil {
		l.after(PointCheckpoint)
	}
	return nil
}

// Finish records the end of the run and removes the log: nothing is left to recover.
func (l *Log) Finish() error {
	if err := l.write(record{Type: "end"}, true); err != nil {
		return err
	}
	if err := l.dl.Close(); err != nil {
		return fmt.Errorf("checkpoint %s: %w", l.dl.Path(), err)
	}
	return removeLog(l.dl.Path())
}

// Close closes the log without finishing it (the run stays recoverable).
func (l *Log) Close() error { return l.dl.Close() }

func removeLog(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return durable.SyncDir(filepath.Dir(path))
}

// Interrupted is what ReadLog found of an earlier run.
type Interrupted struct {
	Path     string
	Header   RunHeader
	Finished bool       // the end record is there: only the file remains to be removed
	Ops      []*OpState // latest state of each operation, in first-seen order
	// TornTail is set when the last record was incompletely written (never acknowledged, so
	// the step it guarded never ran): it is ignored, and cut off when recovery reopens the log.
	TornTail bool
	// Records are every complete record in log order, summarised (the web view shows them).
	Records []Record
}

// ErrInterrupted says a checkpoint log of an unfinished run exists.
var ErrInterrupted = errors.New("an interrupted run must be recovered first (sysbox recover)")

// ReadLog reads dir's checkpoint log; (nil, nil) when there is none. It follows durable.Log's
// one repair rule: only an incomplete final record is ignored (its step never ran); a complete
// record that is corrupt, out of sequence or of an unknown version is an error, since guessing
// progress from a damaged log is exactly what recovery must not do.
func ReadLog(dir string) (*Interrupted, error) {
	path := filepath.Join(dir, CheckpointFile)
	it := &Interrupted{Path: path}
	byAddr := map[string]int{}
	rep, err := durable.Read(path, checkpointKind, checkpointVersion, func(rec durable.Record) error {
		var r record
		if err := rec.Decode(&r); err != nil {
			return err
		}
		it.Records = append(it.Records, r.summary(rec.Seq))
		switch r.Type {
		case "run":
			if rec.Seq != 1 || r.Header == nil {
				return fmt.Errorf("%w: misplaced run header", durable.ErrCorrupt)
			}
			it.Header = *r.Header
		case "op":
			if rec.Seq == 1 || r.Op == nil {
				return fmt.Errorf("%w: operation before run header", durable.ErrCorrupt)
			}
			r.Op.written = true
			if i, ok := byAddr[r.Op.Addr]; ok {
				it.Ops[i] = r.Op
			} else {
				byAddr[r.Op.Addr] = len(it.Ops)
				it.Ops = append(it.Ops, r.Op)
			}
		case "end":
			it.Finished = true
		default:
			return fmt.Errorf("%w: unknown record type %q", durable.ErrCorrupt, r.Type)
		}
		return nil
	})
	if errors.Is(err, os.ErrNotExist) {
		// Only no directory entry at all is "no interrupted run": a dangling symlink in its
		// place would otherwise hide a run that must be recovered.
		if aerr := durable.Absent(path); aerr != nil {
			return nil, fmt.Errorf("checkpoint: %w", aerr)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	it.TornTail = rep.Cut > 0
	if rep.Records == 0 || it.Header.Run == "" {
		// Created but the header never became durable: no step ran.
		it.TornTail = true
	}
	return it, nil
}

// MarshalJSON keeps OpState printing stable for `recover --json` style output.
func (o *OpState) String() string {
	b, _ := json.Marshal(o)
	return string(b)
}
