package upgrade

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"zyvor.dev/sysbox/internal/argv"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
	"zyvor.dev/sysbox/internal/durable"
)

// appendRecord appends a well-formed, checksummed journal record, as someone with write access
// to the transaction directory could.
func appendRecord(t *testing.T, txDir string, ev Event) {
	t.Helper()
	evs, err := ReadJournal(txDir)
	if err != nil {
		t.Fatal(err)
	}
	ev.Seq = len(evs) + 1
	l, err := durable.OpenLog(filepath.Join(txDir, JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append(journalKind, journalVersion, ev); err != nil {
		t.Fatal(err)
	}
}

// TestJournalDamageFailsClosed injects every way the journal can be wrong that its checksums do
// not catch, or that is not a readable file at all, and asserts that run, resume, rollback and
// status all refuse without running a hook.
func TestJournalDamageFailsClosed(t *testing.T) {
	journal := func(p *Plan) string { return filepath.Join(TxDir(p), JournalFile) }
	for _, tc := range []struct {
		name   string
		point  string
		damage func(t *testing.T, p *Plan)
	}{
		{"second begin record with another plan hash", "step-done:a:apply", func(t *testing.T, p *Plan) {
			appendRecord(t, TxDir(p), Event{Type: EvBegin, TransactionID: p.TransactionID, PlanSHA256: "0000000000000000000000000000000000000000000000000000000000000000"})
		}},
		{"step record after the end record", "end", func(t *testing.T, p *Plan) {
			appendRecord(t, TxDir(p), Event{Type: EvStepStart, Component: "a", Step: StepRollback, Attempt: 1})
		}},
		{"unknown record type", "step-done:a:apply", func(t *testing.T, p *Plan) {
			appendRecord(t, TxDir(p), Event{Type: "skip-everything"})
		}},
		{"emptied beside snapshots", "step-done:a:apply", func(t *testing.T, p *Plan) {
			if err := os.Truncate(journal(p), 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed beside snapshots", "step-done:a:apply", func(t *testing.T, p *Plan) {
			if err := os.Remove(journal(p)); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to a copy", "step-done:a:apply", func(t *testing.T, p *Plan) {
			cp := filepath.Join(t.TempDir(), "j")
			b, _ := os.ReadFile(journal(p))
			os.WriteFile(cp, b, 0o600)
			os.Remove(journal(p))
			if err := os.Symlink(cp, journal(p)); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory", "step-done:a:apply", func(t *testing.T, p *Plan) {
			os.Remove(journal(p))
			os.Mkdir(journal(p), 0o700)
		}},
		{"FIFO", "step-done:a:apply", func(t *testing.T, p *Plan) {
			os.Remove(journal(p))
			if err := syscall.Mkfifo(journal(p), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "a")
			p := r.plan("tx")
			crashAt(t, r.engine(), p, tc.point)
			tc.damage(t, p)
			r.takeOrder()
			ctx := context.Background()
			if _, err := r.engine().Resume(ctx, p); !errors.Is(err, ErrJournalCorrupt) {
				t.Errorf("Resume: got %v, want ErrJournalCorrupt", err)
			}
			if _, err := r.engine().Rollback(ctx, p, "test"); !errors.Is(err, ErrJournalCorrupt) {
				t.Errorf("Rollback: got %v, want ErrJournalCorrupt", err)
			}
			if _, err := r.engine().Run(ctx, p); !errors.Is(err, ErrJournalCorrupt) {
				t.Errorf("Run: got %v, want ErrJournalCorrupt (never start over beside snapshots)", err)
			}
			if _, err := ReadStatus(TxDir(p)); !errors.Is(err, ErrJournalCorrupt) {
				t.Errorf("ReadStatus: got %v, want ErrJournalCorrupt", err)
			}
			if o := r.takeOrder(); len(o) != 0 {
				t.Errorf("hooks ran on a damaged journal: %v", o)
			}
		})
	}
}

// TestRestoreRefusesSnapshotNotJournaled swaps, truncates or symlinks a map snapshot and
// rewrites a file snapshot's (validly checksummed) metadata after the apply; the rollback must
// refuse each (manual-intervention) rather than restore from a file the journal does not vouch for.
func TestRestoreRefusesSnapshotNotJournaled(t *testing.T) {
	snapPath := func(p *Plan) string { return filepath.Join(TxDir(p), "snapshots", "a", "maps", "m.snap") }
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, r *rig, p *Plan)
	}{
		{"map snapshot swapped for another valid one", func(t *testing.T, r *rig, p *Plan) {
			// a genuine snapshot of the same map, taken now (after apply added key 03)
			spec := p.Spec(&p.Components[0], &p.Components[0].Maps[0])
			if _, err := r.store.Snapshot(context.Background(), spec, snapPath(p), nil); err != nil {
				t.Fatal(err)
			}
		}},
		{"map snapshot truncated", func(t *testing.T, r *rig, p *Plan) {
			b, _ := os.ReadFile(snapPath(p))
			os.WriteFile(snapPath(p), b[:len(b)/2], 0o600)
		}},
		{"map snapshot is a symlink", func(t *testing.T, r *rig, p *Plan) {
			cp := filepath.Join(t.TempDir(), "s")
			b, _ := os.ReadFile(snapPath(p))
			os.WriteFile(cp, b, 0o600)
			os.Remove(snapPath(p))
			os.Symlink(cp, snapPath(p))
		}},
		{"file snapshot metadata rewritten", func(t *testing.T, r *rig, p *Plan) {
			meta, _ := fileSnapPaths(filepath.Join(TxDir(p), "snapshots", "a", "files"), 0)
			raw, _ := os.ReadFile(meta)
			var s FileSnapshot
			if _, err := durable.DecodeRecord(raw, fileSnapKind, 1, &s); err != nil {
				t.Fatal(err)
			}
			s.Mode = 0o4777 // setuid, world-writable
			b, _ := durable.EncodeRecord(fileSnapKind, 1, s)
			os.WriteFile(meta, b, 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "a")
			conf := filepath.Join(r.dir, "a.conf")
			os.WriteFile(conf, []byte("old"), 0o640)
			r.files["a"] = []string{conf}
			r.effects["a/apply"] = func(argv.Cmd) error { return r.store.Put(r.pin("a"), []byte{3}, []byte{0}) }
			p := r.plan("tx")
			crashAt(t, r.engine(), p, "step-done:a:apply")
			tc.damage(t, r, p)
			res, err := r.engine().Rollback(context.Background(), p, "test")
			// A symlink in the directory also stops the evidence from being written: that error
			// is expected, the state must still be manual-intervention.
			if err != nil && !strings.Contains(err.Error(), "symlink") || res.State != StateManualIntervention {
				t.Fatalf("Rollback: got %s %v (%s), want manual-intervention", res.State, err, res.Reason)
			}
			if fi, err := os.Stat(conf); err != nil || fi.Mode()&os.ModeSetuid != 0 {
				t.Errorf("%s after refused restore: %v %v", conf, fi.Mode(), err)
			}
		})
	}
}

var _ = bpfmap.ErrCorruptSnapshot
