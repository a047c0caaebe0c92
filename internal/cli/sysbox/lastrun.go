package sysbox

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/procfs"
	"zyvor.dev/sysbox/internal/ui"
)

// The last run's file: what a local state-changing run printed and checkpointed, for `sysbox ui`
// (another process). It is a view aid, not state: replaced at each run's start, appended
// during the run, kept after it; a write failure only warns, once.
const (
	lastRunFile    = "last-run.jsonl"
	lastRunKind    = "sysbox-last-run"
	lastRunVersion = 1
)

// lastRunLine is one line of the file. The first is the header (kind, version, command,
// started, pid, pid_start); then progress lines, checkpoint records (the executor's own
// summary) and, last, the end with the outcome.
type lastRunLine struct {
	Type string    `json:"type"` // header | progress | checkpoint | end
	At   time.Time `json:"at"`
	// header
	Kind     string `json:"kind,omitempty"`
	Version  int    `json:"version,omitempty"`
	Command  string `json:"command,omitempty"`
	PID      int    `json:"pid,omitempty"`
	PIDStart string `json:"pid_start,omitempty"` // the process's start time in /proc/PID/stat: a reused pid differs
	// progress
	Line string `json:"line,omitempty"`
	// checkpoint
	Record *executor.Record `json:"record,omitempty"`
	// end
	Outcome string `json:"outcome,omitempty"` // complete | failed
	Error   string `json:"error,omitempty"`
}

// runLog appends a run's lines to the last run's file. A nil *runLog writes nothing.
type runLog struct {
	mu     sync.Mutex
	f      *os.File
	warn   io.Writer
	path   string
	warned bool
}

// startRunLog replaces dir's last run's file with a new one holding the header of a command
// run (written under a temporary name, then renamed, so a reader sees the old run or the new).
func startRunLog(dir, command string, warn io.Writer, now time.Time) *runLog {
	l := &runLog{warn: warn, path: filepath.Join(dir, lastRunFile)}
	if err := l.create(dir, command, now); err != nil {
		l.fail(err)
	}
	return l
}

func (l *runLog) create(dir, command string, now time.Time) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	start, err := procfs.StartTime(os.Getpid())
	if err != nil {
		return err
	}
	b, err := json.Marshal(lastRunLine{Type: "header", At: now.UTC(), Kind: lastRunKind, Version: lastRunVersion,
		Command: command, PID: os.Getpid(), PIDStart: strconv.FormatUint(start, 10)})
	if err != nil {
		return err
	}
	tmp := l.path + ".tmp-" + strconv.Itoa(os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, l.path); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	l.f = f
	return nil
}

// fail warns once and stops writing: the run goes on.
func (l *runLog) fail(err error) {
	if !l.warned && l.warn != nil {
		fmt.Fprintf(l.warn, "Warning: %s (the web view's record of this run) not written: %v\n", l.path, err)
	}
	l.warned = true
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

func (l *runLog) write(ln lastRunLine) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return
	}
	b, err := json.Marshal(ln)
	if err == nil {
		// One write per line: a reader sees whole lines, or an unterminated last one it skips.
		_, err = l.f.Write(append(b, '\n'))
	}
	if err != nil {
		l.fail(err)
	}
}

func (l *runLog) progress(line string) {
	l.write(lastRunLine{Type: "progress", At: time.Now().UTC(), Line: line})
}

func (l *runLog) checkpoint(r executor.Record) {
	l.write(lastRunLine{Type: "checkpoint", At: time.Now().UTC(), Record: &r})
}

// end writes the outcome (msg: the already redacted error, "" on success) and closes the file.
func (l *runLog) end(msg string) {
	if l == nil {
		return
	}
	ln := lastRunLine{Type: "end", At: time.Now().UTC(), Outcome: "complete"}
	if msg != "" {
		ln.Outcome, ln.Error = "failed", msg
	}
	l.write(ln)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// Bounds of what the view keeps of the last run's file.
const lastRunMaxLines = 200

// lastRun is what the view reads of the last run's file.
type lastRun struct {
	header      lastRunLine
	lines       []string          // the last lastRunMaxLines progress lines
	skipped     int64             // progress lines left out before them
	records     []executor.Record // the last ui.MaxCheckpoints
	end         *lastRunLine
	interrupted bool // no end line and the writing process is gone
}

// readLastRun reads dir's last run's file; nil, nil when there is none.
func readLastRun(dir string) (*lastRun, error) {
	path := filepath.Join(dir, lastRunFile)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := &lastRun{}
	br := bufio.NewReader(f)
	for n := 1; ; n++ {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // an unterminated last line is being written: skipped
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var ln lastRunLine
		if err := json.Unmarshal(b, &ln); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		if n == 1 {
			if ln.Type != "header" || ln.Kind != lastRunKind || ln.Version != lastRunVersion {
				return nil, fmt.Errorf("%s: first line is not a %s version %d header", path, lastRunKind, lastRunVersion)
			}
			r.header = ln
			continue
		}
		switch ln.Type {
		case "progress":
			r.lines = append(r.lines, ln.Line)
			if len(r.lines) > lastRunMaxLines {
				r.lines, r.skipped = r.lines[1:], r.skipped+1
			}
		case "checkpoint":
			if ln.Record == nil {
				return nil, fmt.Errorf("%s line %d: checkpoint without a record", path, n)
			}
			r.records = append(r.records, *ln.Record)
			if len(r.records) > ui.MaxCheckpoints {
				r.records = r.records[1:]
			}
		case "end":
			e := ln
			r.end = &e
		default:
			return nil, fmt.Errorf("%s line %d: unknown type %q", path, n, ln.Type)
		}
	}
	if r.header.Type == "" {
		return nil, fmt.Errorf("%s: no header line", path)
	}
	if r.end == nil {
		start, err := procfs.StartTime(r.header.PID)
		r.interrupted = err != nil || strconv.FormatUint(start, 10) != r.header.PIDStart
	}
	return r, nil
}
