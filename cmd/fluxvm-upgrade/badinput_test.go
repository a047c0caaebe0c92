package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/testenv"
)

// runBounded runs the binary with a deadline, so that an input that makes it block (a FIFO)
// fails the test instead of hanging it.
func (w *world) runBounded(t *testing.T, args ...string) (code int, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.Env = append(os.Environ(), "FLUXVM_UPGRADE_TEST_FAKE_BPF="+w.fake)
	var se bytes.Buffer
	cmd.Stderr = &se
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after 60 s (blocked on its input?)", args)
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() {
			t.Fatalf("%v: killed by %v: %s", args, st.Signal(), se.String())
		}
		return ee.ExitCode(), se.String()
	}
	if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return 0, se.String()
}

// TestBadInputSweep gives every command that reads a file or directory each kind of bad input:
// a clear error naming the input, the documented exit code, no hang, nothing written.
func TestBadInputSweep(t *testing.T) {
	w := newWorld(t, "")
	in := t.TempDir()
	type badFile struct {
		name string
		path string
		code int
	}
	files := []badFile{{"unreadable (EIO)", "/proc/self/mem", exitError}}
	for _, b := range testenv.BadFiles([]byte("{\"transaction_id\":\"tx\xff\xfe\",\"components\":[]}")) {
		f := badFile{name: b.Name, path: filepath.Join(in, b.Name+".json"), code: exitError}
		if err := b.Make(f.path); err != nil {
			t.Fatal(err)
		}
		switch b.Name {
		case "empty", "100MB", "invalid-utf8": // read, then refused as a plan
			f.code = exitInvalidPlan
		}
		files = append(files, f)
	}
	for _, cmd := range []string{"validate", "probe", "plan", "run", "resume", "rollback", "status"} {
		for _, f := range files {
			t.Run(cmd+"/"+f.name, func(t *testing.T) {
				code, stderr := w.runBounded(t, cmd, f.path)
				if code != f.code || !strings.Contains(stderr, f.path) {
					t.Errorf("%s %s: exit %d, want %d with an error naming the input:\n%s", cmd, f.name, code, f.code, stderr)
				}
			})
		}
	}
	type badDir struct{ name, path string }
	dirs := []badDir{{"a regular file", filepath.Join(in, "file")}}
	if err := os.WriteFile(dirs[0].path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, b := range testenv.BadFiles(nil) {
		switch b.Name {
		case "missing", "fifo", "symlink-loop":
			d := badDir{b.Name, filepath.Join(in, b.Name+"-dir")}
			if err := b.Make(d.path); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		t.Run("verify-evidence/"+d.name, func(t *testing.T) {
			if code, stderr := w.runBounded(t, "verify-evidence", d.path); code != exitEvidence || !strings.Contains(stderr, d.path) {
				t.Errorf("exit %d, want %d naming the input:\n%s", code, exitEvidence, stderr)
			}
		})
		t.Run("status --dir/"+d.name, func(t *testing.T) {
			if code, stderr := w.runBounded(t, "status", "--dir", d.path); code == 0 || !strings.Contains(stderr, d.path) {
				t.Errorf("exit %d, want non-zero naming the input:\n%s", code, stderr)
			}
		})
		t.Run("reconcile --state-dir/"+d.name, func(t *testing.T) {
			code, stderr := w.runBounded(t, "reconcile", "--state-dir", d.path, "--stale-minutes", "0")
			if d.name == "missing" {
				if code != 0 {
					t.Errorf("reconcile of a missing state dir (nothing to do): exit %d: %s", code, stderr)
				}
				return
			}
			if code == 0 || !strings.Contains(stderr, d.path) {
				t.Errorf("exit %d, want non-zero naming the input:\n%s", code, stderr)
			}
		})
	}
	if _, err := os.Stat(w.state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bad inputs created the state dir: %v", err)
	}
	if o := w.hookOrder(); len(o) != 0 {
		t.Errorf("hooks ran on bad input: %v", o)
	}
}
