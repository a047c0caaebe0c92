package sysbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/secrets"
	"zyvor.dev/sysbox/internal/ui"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestLastRunFile: a run's progress lines and every checkpoint record reach the last run's
// file and the view, also those written after the checkpoint log is gone; the next run
// replaces the file; no secret plaintext gets there.
func TestLastRunFile(t *testing.T) {
	const secret = "PRIVATE-SECRET-VALUE"
	var stdout, stderr bytes.Buffer
	a := &App{Env: &Env{Stdout: &stdout, Stderr: &stderr, LookupEnv: lookupIn(nil)}, ChDir: t.TempDir()}
	dir := a.checkpointDir()
	v := &checkpointView{dir: dir}
	red := &secrets.Redactor{}
	red.Add(secret)
	prog := newProgress(a, red)
	prog.run = startRunLog(dir, "apply", a.Env.Stderr, time.Now())

	r := v.run()
	if r == nil || r.Op != "apply" || r.Status != uiRunOpen || len(r.Lines) != 0 || len(r.Checkpoints) != 0 {
		t.Fatalf("after the header: got %+v, want an open apply run without lines", r)
	}
	l, err := executor.CreateLog(dir, executor.RunHeader{Run: "run-1", Command: "apply", Lineage: "PRIVATE-LINEAGE"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wrote []executor.Record
	record := func() { // what the executor's Checkpointed hook hands on: the newest record
		it, err := executor.ReadLog(dir)
		if err != nil {
			t.Fatal(err)
		}
		rec := it.Records[len(it.Records)-1]
		wrote = append(wrote, rec)
		prog.run.checkpoint(rec)
	}
	record()
	op := &executor.OpState{Addr: "sysbox_node.web[0]", Op: plans.Create, Step: executor.StepCreated,
		Owner:  substrate.Owner{Topology: "PRIVATE-LINEAGE", Address: "sysbox_node.web[0]"},
		Handle: &substrate.Handle{Driver: "netns", ExternalID: "PRIVATE-EXTERNAL", Private: substrate.Envelope{Driver: "netns", Version: 1, Data: json.RawMessage(`"PRIVATE-ENVELOPE"`)}},
		Action: executor.Action{Addr: addrs.MustParseInstance("sysbox_node.web[0]"), Op: plans.Create, Attributes: json.RawMessage(`{"env":"secret://env/PRIVATE_REF"}`)}}
	prog.event(executor.Event{Addr: "sysbox_node.web[0]", Op: plans.Create, Phase: "start"})
	for _, s := range []executor.Step{executor.StepCreated, executor.StepStarted, executor.StepDone} {
		op.Step = s
		if err := l.Checkpoint(op); err != nil {
			t.Fatal(err)
		}
		record()
	}
	prog.event(executor.Event{Addr: "sysbox_node.web[1]", Op: plans.Create, Phase: "failed", Err: errors.New("boot: token " + secret + " refused")})
	if err := l.Finish(); err != nil {
		t.Fatal(err)
	}
	// The end record was written after the checkpoint log's last read: the view never saw it
	// in checkpoint.log, which is gone now.
	if _, err := os.Stat(filepath.Join(dir, executor.CheckpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("checkpoint log after Finish: %v, want it removed", err)
	}
	wrote = append(wrote, executor.Record{Seq: wrote[len(wrote)-1].Seq + 1, At: time.Now().UTC(), Type: ui.CheckpointEnd})
	prog.run.checkpoint(wrote[len(wrote)-1])
	running := v.run()
	prog.run.end(red.Redact("apply: 1 failed: " + secret))

	ended := v.run()
	wantLines := []string{"sysbox_node.web[0]: Creating...", "sysbox_node.web[1]: failed: boot: token " + secrets.Redacted + " refused"}
	if ended == nil || ended.Status != uiRunEnded || ended.ID != "run-1" || !cmp.Equal(ended.Lines, wantLines) {
		t.Fatalf("after the end: got %+v, want run-1 ended with lines %q", ended, wantLines)
	}
	if !strings.HasPrefix(ended.Result, "failed: ") || running.Status != uiRunOpen {
		t.Fatalf("result %q (want failed: …), status before the end %q (want %q)", ended.Result, running.Status, uiRunOpen)
	}
	var want []ui.Checkpoint
	for _, rec := range wrote {
		want = append(want, uiCheckpoint(rec))
	}
	if !cmp.Equal(ended.Checkpoints, want) || len(want) != 5 {
		t.Fatalf("checkpoints shown:\n%+v\nwant all %d the run wrote:\n%+v", ended.Checkpoints, len(want), want)
	}
	file, err := os.ReadFile(filepath.Join(dir, lastRunFile))
	if err != nil {
		t.Fatal(err)
	}
	page, err := json.Marshal(ended)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{secret, "PRIVATE-LINEAGE", "PRIVATE-EXTERNAL", "PRIVATE-ENVELOPE", "PRIVATE_REF", "handle", "owner"} {
		if bytes.Contains(file, []byte(p)) || bytes.Contains(page, []byte(p)) {
			t.Errorf("%q in the last run's file or its view:\n%s\n%s", p, file, page)
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("warnings from a working file: %s", stderr.String())
	}

	// The next run replaces the file at its start.
	next := startRunLog(dir, "destroy", a.Env.Stderr, time.Now())
	defer next.end("")
	r = v.run()
	if r == nil || r.Op != "destroy" || r.Status != uiRunOpen || len(r.Lines) != 0 || len(r.Checkpoints) != 0 || r.ID != "" {
		t.Fatalf("after the next run started: got %+v, want an open destroy run with nothing of the last", r)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, lastRunFile+".tmp-*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}

// TestLastRunInterrupted: a run without an end whose process is gone, or whose pid now
// names another process (other start time), is shown interrupted.
func TestLastRunInterrupted(t *testing.T) {
	dir := t.TempDir()
	v := &checkpointView{dir: dir}
	l := startRunLog(dir, "reset", nil, time.Now())
	l.progress("sysbox_node.web[0]: Resetting...")
	path := filepath.Join(dir, lastRunFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header, rest, _ := bytes.Cut(b, []byte("\n"))
	var h lastRunLine
	if err := json.Unmarshal(header, &h); err != nil {
		t.Fatal(err)
	}
	if h.PID != os.Getpid() || h.PIDStart == "" || h.Version != lastRunVersion || h.Command != "reset" {
		t.Fatalf("header %+v", h)
	}
	rewrite := func(h lastRunLine) {
		hb, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(append(hb, '\n'), rest...), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if r := v.run(); r.Status != uiRunOpen {
		t.Fatalf("own process: got %+v, want running", r)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*lastRunLine){
		"process gone":     func(h *lastRunLine) { h.PID = gone.Process.Pid },
		"pid reused":       func(h *lastRunLine) { h.PIDStart += "1" },
		"no start time":    func(h *lastRunLine) { h.PIDStart = "" },
		"pid of no number": func(h *lastRunLine) { h.PID = -1 },
	} {
		hh := h
		mod(&hh)
		rewrite(hh)
		r := v.run()
		if r.Status != uiRunInterrupted || !cmp.Equal(r.Lines, []string{"sysbox_node.web[0]: Resetting..."}) {
			t.Errorf("%s: got %+v, want interrupted with its line", name, r)
		}
	}
	// An ended run is not interrupted, whatever became of its process.
	rewrite(h)
	l.end("")
	hh := h
	hh.PID = gone.Process.Pid
	b, _ = os.ReadFile(path)
	_, rest, _ = bytes.Cut(b, []byte("\n"))
	rewrite(hh)
	if r := v.run(); r.Status != uiRunEnded || r.Result != "reset complete" {
		t.Fatalf("ended run: got %+v", r)
	}
}

// TestLastRunWriteFailure: a last run's file that cannot be written warns once and the run
// goes on; the view says it cannot read a broken file instead of showing nothing.
func TestLastRunWriteFailure(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, ".sysbox")
	if err := os.WriteFile(dir, nil, 0o600); err != nil { // a file where the directory should be
		t.Fatal(err)
	}
	var warn bytes.Buffer
	l := startRunLog(dir, "apply", &warn, time.Now())
	l.progress("one")
	l.checkpoint(executor.Record{Seq: 1, Type: ui.CheckpointRun})
	l.end("")
	if n := strings.Count(warn.String(), "Warning:"); n != 1 || !strings.Contains(warn.String(), lastRunFile) {
		t.Fatalf("warnings: %q, want one naming %s", warn.String(), lastRunFile)
	}
	var nilLog *runLog
	nilLog.progress("x") // a runtime without a run writes nothing
	nilLog.end("")

	ok := t.TempDir()
	if err := os.WriteFile(filepath.Join(ok, lastRunFile), []byte("{\"type\":\"progress\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := (&checkpointView{dir: ok}).run(); r == nil || r.Status != uiRunUnreadable || !strings.Contains(r.Result, lastRunFile) {
		t.Fatalf("headerless file: got %+v, want unreadable naming the file", r)
	}
}
