package exec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

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
	StepWired: 6, StepStarted: 7, StepApplied: 8, StepObserved: 9, StepProvisioned: 10, StepReapplied: 11,
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
	Op          Op                          `json:"action"`
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

// Log is the active run's checkpoint log. Writes from concurrent workers are group-committed:
// records that arrive while a write+fsync is in flight go out together in the next one, and
// each writer returns only after its own record is durable.
type Log struct {
	path string
	f    *os.File

	mu       sync.Mutex
	cond     *sync.Cond
	seq      uint64
	queue    [][]byte
	next     uint64 // id of the batch being filled
	done     uint64 // id of the last batch made durable
	flushing bool
	err      error // sticky: after a failed write or fsync nothing more is acknowledged

	syncs   uint64
	records uint64
	after   func(point string) // Executor.AfterDurable
}

// Stats reports how many records and fsyncs a log has done (for benchmarks).
type Stats struct{ Records, Syncs uint64 }

// CreateLog starts a new checkpoint log in dir with h as its first record. An existing log
// (an interrupted run) is an error: recover first.
func CreateLog(dir string, h RunHeader, after func(point string)) (*Log, error) {
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	path := filepath.Join(dir, CheckpointFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("checkpoint %s: %w", path, ErrInterrupted)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if err := durable.SyncDir(dir); err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	l := &Log{path: path, f: f, next: 1, after: after}
	l.cond = sync.NewCond(&l.mu)
	if err := l.write(record{Type: "run", Header: &h}); err != nil {
		return nil, err
	}
	return l, nil
}

// reopenLog continues an interrupted run's log (recovery appends to it, so that a crash during
// recovery is recoverable too). A torn tail, never acknowledged, is cut off first.
func reopenLog(it *Interrupted, after func(point string)) (*Log, error) {
	f, err := os.OpenFile(it.Path, os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if it.TornTail {
		if err := f.Truncate(it.validSize); err != nil {
			f.Close()
			return nil, fmt.Errorf("checkpoint %s: cut torn tail: %w", it.Path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, fmt.Errorf("checkpoint %s: %w", it.Path, err)
		}
	}
	if _, err := f.Seek(0, 2); err != nil {
		f.Close()
		return nil, fmt.Errorf("checkpoint %s: %w", it.Path, err)
	}
	l := &Log{path: it.Path, f: f, next: 1, seq: it.lastSeq, after: after}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

// Path is the log's file path.
func (l *Log) Path() string { return l.path }

// Stats returns counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Stats{Records: l.records, Syncs: l.syncs}
}

// Checkpoint durably records op (a copy is taken). It returns after the record is fsynced.
func (l *Log) Checkpoint(op *OpState) error {
	c := *op
	return l.write(record{Type: "op", Op: &c})
}

// write encodes r and group-commits it.
func (l *Log) write(r record) error {
	l.mu.Lock()
	l.seq++
	r.Seq = l.seq
	r.At = time.Now().UTC()
	b, err := durable.EncodeRecord(checkpointKind, checkpointVersion, r)
	if err != nil {
		l.mu.Unlock()
		return fmt.Errorf("checkpoint: %w", err)
	}
	l.queue = append(l.queue, append(b, '\n'))
	my := l.next
	for l.done < my && l.err == nil {
		if l.flushing {
			l.cond.Wait()
			continue
		}
		l.flushing = true
		batch, id := l.queue, l.next
		l.queue = nil
		l.next++
		l.mu.Unlock()
		werr := writeSync(l.f, batch)
		l.mu.Lock()
		l.flushing = false
		if werr != nil {
			l.err = fmt.Errorf("checkpoint %s: %w", l.path, werr)
		} else {
			l.done = id
			l.syncs++
			l.records += uint64(len(batch))
		}
		l.cond.Broadcast()
	}
	err = l.err
	l.mu.Unlock()
	if err == nil && l.after != nil {
		l.after(PointCheckpoint)
	}
	return err
}

func writeSync(f *os.File, batch [][]byte) error {
	if _, err := f.Write(bytes.Join(batch, nil)); err != nil {
		return err
	}
	return f.Sync()
}

// Finish records the end of the run and removes the log: nothing is left to recover.
func (l *Log) Finish() error {
	if err := l.write(record{Type: "end"}); err != nil {
		return err
	}
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("checkpoint %s: %w", l.path, err)
	}
	return removeLog(l.path)
}

// Close closes the log without finishing it (the run stays recoverable).
func (l *Log) Close() error { return l.f.Close() }

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
	// the step it guarded never ran); it is ignored.
	TornTail bool

	validSize int64
	lastSeq   uint64
}

// ErrInterrupted says a checkpoint log of an unfinished run exists.
var ErrInterrupted = errors.New("an interrupted run must be recovered first (sysbox recover)")

// ReadLog reads dir's checkpoint log; (nil, nil) when there is none. A torn last record is
// ignored (its step never ran); any other corrupt or unknown-version record is an error, since
// guessing progress from a damaged log is exactly what recovery must not do.
func ReadLog(dir string) (*Interrupted, error) {
	path := filepath.Join(dir, CheckpointFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	it := &Interrupted{Path: path}
	byAddr := map[string]int{}
	n := 0
	for len(data) > 0 {
		n++
		line, rest, complete := bytes.Cut(data, []byte{'\n'})
		data = rest
		var r record
		_, derr := durable.DecodeRecord(line, checkpointKind, checkpointVersion, &r)
		if derr != nil {
			if len(rest) == 0 && (!complete || errors.Is(derr, durable.ErrCorrupt)) {
				it.TornTail = true
				break
			}
			return nil, fmt.Errorf("checkpoint %s: record %d: %w", path, n, derr)
		}
		it.validSize += int64(len(line)) + 1
		it.lastSeq = r.Seq
		switch r.Type {
		case "run":
			if n != 1 || r.Header == nil {
				return nil, fmt.Errorf("checkpoint %s: record %d: %w: misplaced run header", path, n, durable.ErrCorrupt)
			}
			it.Header = *r.Header
		case "op":
			if n == 1 || r.Op == nil {
				return nil, fmt.Errorf("checkpoint %s: record %d: %w: operation before run header", path, n, durable.ErrCorrupt)
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
			return nil, fmt.Errorf("checkpoint %s: record %d: %w: unknown record type %q", path, n, durable.ErrCorrupt, r.Type)
		}
	}
	if n == 0 || it.Header.Run == "" {
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
