package upgrade

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
	"zyvor.dev/sysbox/fluxvm/evidence"
	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/testenv"
)

// rig is a transaction test bed: a fake map store, a fake hook runner whose hooks record their
// order and may have side effects, a state dir and a bpffs root in a temp dir.
type rig struct {
	t        *testing.T
	dir      string
	stateDir string
	bpffs    string
	store    *bpfmap.Fake
	runner   *argv.Fake
	mu       sync.Mutex
	order    []string
	effects  map[string]func(cmd argv.Cmd) error // "comp/step" -> side effect / failure
	comps    []string
	policy   bpfmap.Policy
	files    map[string][]string
	extra    string // extra JSON fields for every component
}

func newRig(t *testing.T, comps ...string) *rig {
	t.Helper()
	dir := t.TempDir()
	r := &rig{t: t, dir: dir, stateDir: filepath.Join(dir, "state"), bpffs: filepath.Join(dir, "bpf"),
		store: bpfmap.NewFake(), effects: map[string]func(argv.Cmd) error{}, comps: comps,
		policy: bpfmap.Merge, files: map[string][]string{}}
	if err := os.MkdirAll(r.bpffs, 0o755); err != nil {
		t.Fatal(err)
	}
	r.runner = &argv.Fake{Strict: true, Script: map[string]argv.FakeResponse{}}
	for _, c := range comps {
		if err := os.MkdirAll(filepath.Join(dir, "hooks", c), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, step := range []string{"preflight", "apply", "health", "rollback", "rollback_health"} {
			key := c + "/" + step
			// the file exists and is executable for probe; the fake runner stands in for it
			if err := os.WriteFile(filepath.Join(dir, "hooks", key), []byte("#!/bin/false\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			r.runner.Script[filepath.Join(dir, "hooks", key)] = argv.FakeResponse{Do: func(cmd argv.Cmd) (argv.Result, error) {
				r.mu.Lock()
				r.order = append(r.order, key)
				eff := r.effects[key]
				r.mu.Unlock()
				if !hasEnv(cmd.Env, "FLUXVM_COMPONENT="+c) || !hasEnv(cmd.Env, "FLUXVM_STEP="+stepName(step)) {
					return argv.Result{ExitCode: 2}, fmt.Errorf("hook env missing context: %v", cmd.Env)
				}
				if eff != nil {
					if err := eff(cmd); err != nil {
						return argv.Result{ExitCode: 1, Stderr: []byte(err.Error())}, &argv.ExitError{Argv: cmd.Argv, Result: argv.Result{ExitCode: 1, Stderr: []byte(err.Error())}}
					}
				}
				return argv.Result{Stdout: []byte("ok " + key)}, nil
			}}
		}
		// every component has one map with entries 01->0a, 02->0b
		pin := r.pin(c)
		if err := r.store.Create(pin, bpfmap.ABI{Type: "Hash", KeySize: 1, ValueSize: 1, MaxEntries: 4}); err != nil {
			t.Fatal(err)
		}
		r.put(pin, "01", "0a")
		r.put(pin, "02", "0b")
	}
	return r
}

func stepName(hook string) string {
	if hook == "rollback_health" {
		return StepRollbackHealth
	}
	return hook
}

func hasEnv(env []string, kv string) bool {
	for _, e := range env {
		if e == kv {
			return true
		}
	}
	return false
}

func (r *rig) pin(c string) string { return filepath.Join(r.bpffs, c, "m") }

func (r *rig) put(pin, k, v string) {
	r.t.Helper()
	kb, _ := hex.DecodeString(k)
	vb, _ := hex.DecodeString(v)
	if err := r.store.Put(pin, kb, vb); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) entries(c string) map[string]string {
	r.t.Helper()
	e, err := r.store.Entries(r.pin(c))
	if err != nil {
		r.t.Fatal(err)
	}
	return e
}

func (r *rig) planJSON(txID string) string {
	var comps []string
	for _, c := range r.comps {
		hooks := fmt.Sprintf(`{"preflight":["%[2]s/%[1]s/preflight"],"apply":["%[2]s/%[1]s/apply"],"health":["%[2]s/%[1]s/health"],"rollback":["%[2]s/%[1]s/rollback"],"rollback_health":["%[2]s/%[1]s/rollback_health"]}`, c, filepath.Join(r.dir, "hooks"))
		files, _ := json.Marshal(append([]string{}, r.files[c]...))
		comps = append(comps, fmt.Sprintf(`{"name":%q,"hooks":%s,"files":%s,"maps":[{"name":"m","pin":"%s/m","policy":%q,"type":"hash","key_size":1,"value_size":1}]%s}`,
			c, hooks, files, c, r.policy, r.extra))
	}
	return fmt.Sprintf(`{"transaction_id":%q,"state_dir":%q,"bpffs_root":%q,"components":[%s]}`, txID, r.stateDir, r.bpffs, strings.Join(comps, ","))
}

func (r *rig) plan(txID string) *Plan {
	r.t.Helper()
	p, err := ParsePlan("plan.json", []byte(r.planJSON(txID)))
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

func (r *rig) engine() *Engine {
	return &Engine{Store: r.store, Runner: r.runner, ToolVersion: "test"}
}

func (r *rig) takeOrder() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.order
	r.order = nil
	return o
}

// recreate makes an apply/rollback hook recreate the component's map empty (as an upgrade does),
// optionally with another ABI, and add one entry of its own.
func (r *rig) recreate(c string, abi bpfmap.ABI, newKey string) func(argv.Cmd) error {
	return func(argv.Cmd) error {
		if err := r.store.Create(r.pin(c), abi); err != nil {
			return err
		}
		if newKey != "" {
			kb, _ := hex.DecodeString(newKey)
			return r.store.Put(r.pin(c), kb, make([]byte, abi.ValueSize))
		}
		return nil
	}
}

var hashABI = bpfmap.ABI{Type: "Hash", KeySize: 1, ValueSize: 1, MaxEntries: 4}

func verifyEvidence(t *testing.T, dir string) {
	t.Helper()
	if _, err := evidence.Verify(context.Background(), dir, evidence.VerifyOptions{}); err != nil {
		t.Errorf("evidence of %s: %v", dir, err)
	}
}

func TestRunCommitsAndMergesMapState(t *testing.T) {
	r := newRig(t, "a", "b")
	cfg := filepath.Join(r.dir, "a.conf")
	if err := os.WriteFile(cfg, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	r.files["a"] = []string{cfg}
	for _, c := range r.comps {
		c := c
		r.effects[c+"/apply"] = func(cmd argv.Cmd) error {
			if c == "a" {
				if err := os.WriteFile(cfg, []byte("new"), 0o640); err != nil {
					return err
				}
			}
			return r.recreate(c, hashABI, "03")(cmd)
		}
		r.effects[c+"/health"] = func(argv.Cmd) error {
			// health runs after restore: the old entries must be back already
			if got := len(r.entries(c)); got != 3 {
				return fmt.Errorf("health: %d entries, want 3", got)
			}
			return nil
		}
	}
	p := r.plan("tx-ok")
	res, err := r.engine().Run(context.Background(), p)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.State != StateCommitted {
		t.Fatalf("got state %s (%s), want committed", res.State, res.Reason)
	}
	if diff := cmp.Diff([]string{"a/preflight", "a/apply", "a/health", "b/preflight", "b/apply", "b/health"}, r.takeOrder()); diff != "" {
		t.Errorf("hook order (-want +got):\n%s", diff)
	}
	want := map[string]string{"01": "0a", "02": "0b", "03": "00"}
	for _, c := range r.comps {
		if diff := cmp.Diff(want, r.entries(c)); diff != "" {
			t.Errorf("map %s after merge (-want +got):\n%s", c, diff)
		}
	}
	if b, _ := os.ReadFile(cfg); string(b) != "new" {
		t.Errorf("file after commit: got %q, want %q (file snapshots are rollback-only)", b, "new")
	}
	dir := TxDir(p)
	verifyEvidence(t, dir)
	for _, f := range []string{PlanFile, JournalFile, FinalFile, evidence.ManifestFile, "snapshots/a/maps/m.snap", "snapshots/a/files/000.json", "snapshots/a/files/000.data", "logs/a.apply.1.log"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("transaction dir: %v", err)
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, "logs/b.health.1.log"))
	if !strings.Contains(string(log), "ok b/health") {
		t.Errorf("hook log: got %q, want the hook's stdout", log)
	}
	// A finished transaction is not run twice.
	if _, err := r.engine().Run(context.Background(), p); !errors.Is(err, ErrTransactionExists) {
		t.Errorf("second Run: got %v, want ErrTransactionExists", err)
	}
	// Resume of a terminal transaction reports it and runs nothing.
	res, err = r.engine().Resume(context.Background(), p)
	if err != nil || res.State != StateCommitted || len(r.takeOrder()) != 0 {
		t.Errorf("Resume after commit: got %v %v, want committed with no hooks run", res, err)
	}
}

func TestReplacePolicyDropsNewKeys(t *testing.T) {
	r := newRig(t, "a")
	r.policy = bpfmap.Replace
	r.effects["a/apply"] = r.recreate("a", hashABI, "03")
	res, err := r.engine().Run(context.Background(), r.plan("tx"))
	if err != nil || res.State != StateCommitted {
		t.Fatalf("Run: %v %v", res, err)
	}
	if diff := cmp.Diff(map[string]string{"01": "0a", "02": "0b"}, r.entries("a")); diff != "" {
		t.Errorf("map after replace (-want +got):\n%s", diff)
	}
}

func TestFailureRollsBackInReverseOrderAndRestoresFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: ownership restore is checked only for the current user")
	}
	r := newRig(t, "a", "b", "c")
	created := filepath.Join(r.dir, "created.conf") // absent before, created by apply
	deleted := filepath.Join(r.dir, "deleted.conf") // present before, deleted by apply
	changed := filepath.Join(r.dir, "changed.conf") // modified and chmod'ed by apply
	link := filepath.Join(r.dir, "current")         // symlink retargeted by apply
	orig := []byte("original\x00bytes\n")
	if err := os.WriteFile(deleted, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(changed, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(changed, 0o754|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("v1", link); err != nil {
		t.Fatal(err)
	}
	r.files["a"] = []string{created, deleted}
	r.files["b"] = []string{changed, link}
	r.effects["a/apply"] = func(cmd argv.Cmd) error {
		if err := os.WriteFile(created, []byte("new"), 0o644); err != nil {
			return err
		}
		if err := os.Remove(deleted); err != nil {
			return err
		}
		return r.recreate("a", hashABI, "")(cmd)
	}
	r.effects["b/apply"] = func(cmd argv.Cmd) error {
		if err := os.WriteFile(changed, []byte("v2"), 0o600); err != nil {
			return err
		}
		os.Remove(link)
		if err := os.Symlink("v2", link); err != nil {
			return err
		}
		return r.recreate("b", hashABI, "")(cmd)
	}
	r.effects["c/apply"] = r.recreate("c", hashABI, "")
	r.effects["c/health"] = func(argv.Cmd) error { return errors.New("enforcement broken") }
	// rollback hooks recreate the old (empty) maps, as real ones re-pin old programs' maps
	for _, c := range r.comps {
		r.effects[c+"/rollback"] = r.recreate(c, hashABI, "")
	}
	p := r.plan("tx-fail")
	res, err := r.engine().Run(context.Background(), p)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.State != StateRolledBack || !strings.Contains(res.Reason, "enforcement broken") {
		t.Fatalf("got %s (%s), want rolled-back naming the health failure", res.State, res.Reason)
	}
	want := []string{"a/preflight", "a/apply", "a/health", "b/preflight", "b/apply", "b/health", "c/preflight", "c/apply", "c/health",
		"c/rollback", "c/rollback_health", "b/rollback", "b/rollback_health", "a/rollback", "a/rollback_health"}
	if diff := cmp.Diff(want, r.takeOrder()); diff != "" {
		t.Errorf("hook order (-want +got):\n%s", diff)
	}
	if _, err := os.Lstat(created); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("file apply created: got %v, want it gone after rollback", err)
	}
	if b, err := os.ReadFile(deleted); err != nil || string(b) != string(orig) {
		t.Errorf("file apply deleted: got %q %v, want %q byte for byte", b, err, orig)
	}
	fi, err := os.Stat(changed)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(changed); string(b) != "v1" {
		t.Errorf("changed file: got %q, want v1", b)
	}
	if got, want := fi.Mode()&(os.ModePerm|os.ModeSetuid), os.FileMode(0o754)|os.ModeSetuid; got != want {
		t.Errorf("changed file mode: got %v, want %v", got, want)
	}
	if tgt, _ := os.Readlink(link); tgt != "v1" {
		t.Errorf("symlink: got target %q, want v1", tgt)
	}
	for _, c := range r.comps {
		if diff := cmp.Diff(map[string]string{"01": "0a", "02": "0b"}, r.entries(c)); diff != "" {
			t.Errorf("map %s after rollback (-want +got):\n%s", c, diff)
		}
	}
	verifyEvidence(t, TxDir(p))
	st, err := ReadStatus(TxDir(p))
	if err != nil {
		t.Fatal(err)
	}
	if st.State != StateRolledBack || st.Components[2].Steps[4].Outcome != "failed" {
		t.Errorf("status: got %+v", st)
	}
}

func TestPreflightFailureRollsBackOnlyAppliedComponents(t *testing.T) {
	r := newRig(t, "a", "b")
	r.effects["b/preflight"] = func(argv.Cmd) error { return errors.New("config cannot reproduce policy") }
	res, err := r.engine().Run(context.Background(), r.plan("tx"))
	if err != nil || res.State != StateRolledBack {
		t.Fatalf("Run: %v %v", res, err)
	}
	if diff := cmp.Diff([]string{"a/preflight", "a/apply", "a/health", "b/preflight", "a/rollback", "a/rollback_health"}, r.takeOrder()); diff != "" {
		t.Errorf("hook order (-want +got):\n%s", diff)
	}
}

func TestRestoreRefusalsRollBack(t *testing.T) {
	tests := []struct {
		name    string
		abi     bpfmap.ABI
		wantErr error
	}{
		{"value size changed", bpfmap.ABI{Type: "Hash", KeySize: 1, ValueSize: 2, MaxEntries: 4}, bpfmap.ErrABIMismatch},
		{"type changed", bpfmap.ABI{Type: "LRUHash", KeySize: 1, ValueSize: 1, MaxEntries: 4}, bpfmap.ErrABIMismatch},
		{"over capacity", bpfmap.ABI{Type: "Hash", KeySize: 1, ValueSize: 1, MaxEntries: 1}, bpfmap.ErrOverCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "a")
			r.effects["a/apply"] = r.recreate("a", tt.abi, "")
			r.effects["a/rollback"] = r.recreate("a", hashABI, "")
			p := r.plan("tx")
			res, err := r.engine().Run(context.Background(), p)
			if err != nil || res.State != StateRolledBack {
				t.Fatalf("Run: %v %v", res, err)
			}
			st, _ := ReadStatus(TxDir(p))
			restore := st.Components[0].Steps[3]
			if restore.Step != StepRestore || restore.Outcome != "failed" || !strings.Contains(restore.Error, tt.wantErr.Error()) {
				t.Errorf("restore step: got %+v, want failed with %v", restore, tt.wantErr)
			}
			if diff := cmp.Diff(map[string]string{"01": "0a", "02": "0b"}, r.entries("a")); diff != "" {
				t.Errorf("map after rollback (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFailingRollbackIsManualIntervention(t *testing.T) {
	tests := []struct {
		name   string
		effect func(r *rig)
		reason string
	}{
		{"rollback hook fails", func(r *rig) {
			r.effects["b/rollback"] = func(argv.Cmd) error { return errors.New("cannot re-pin old program") }
		}, "cannot re-pin old program"},
		{"map restore fails", func(r *rig) {
			r.effects["b/rollback"] = r.recreate("b", bpfmap.ABI{Type: "Hash", KeySize: 2, ValueSize: 1, MaxEntries: 4}, "")
		}, "ABI mismatch"},
		{"rollback_health fails", func(r *rig) {
			r.effects["b/rollback_health"] = func(argv.Cmd) error { return errors.New("still broken") }
		}, "still broken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, "a", "b")
			r.effects["b/health"] = func(argv.Cmd) error { return errors.New("unhealthy") }
			tt.effect(r)
			p := r.plan("tx")
			res, err := r.engine().Run(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if res.State != StateManualIntervention || !strings.Contains(res.Reason, tt.reason) {
				t.Errorf("got %s (%s), want manual-intervention naming %q", res.State, res.Reason, tt.reason)
			}
			// the other component is still rolled back
			order := r.takeOrder()
			if order[len(order)-2] != "a/rollback" {
				t.Errorf("hook order: got %v, want a's rollback after b's failure", order)
			}
			verifyEvidence(t, TxDir(p))
		})
	}
}

func TestResumeRefusesModifiedPlan(t *testing.T) {
	r := newRig(t, "a")
	crashAt(t, r.engine(), r.plan("tx"), "step-done:a:apply")
	r.policy = bpfmap.Replace // a semantic change
	_, err := r.engine().Resume(context.Background(), r.plan("tx"))
	var pm *PlanModifiedError
	if !errors.As(err, &pm) || pm.Begun == pm.Now || !strings.Contains(err.Error(), pm.Begun) || !strings.Contains(err.Error(), pm.Now) {
		t.Fatalf("Resume with modified plan: got %v, want PlanModifiedError with both hashes", err)
	}
	if _, err := r.engine().Rollback(context.Background(), r.plan("tx"), "x"); !errors.Is(err, ErrPlanModified) {
		t.Errorf("Rollback with modified plan: got %v, want ErrPlanModified", err)
	}
}

func TestSecondProcessFailsOnLock(t *testing.T) {
	r := newRig(t, "a")
	p := r.plan("tx")
	if err := os.MkdirAll(r.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := durable.Lock(LockPath(r.stateDir, "tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	for name, f := range map[string]func() error{
		"run":      func() error { _, err := r.engine().Run(context.Background(), p); return err },
		"resume":   func() error { _, err := r.engine().Resume(context.Background(), p); return err },
		"rollback": func() error { _, err := r.engine().Rollback(context.Background(), p, ""); return err },
	} {
		start := time.Now()
		err := f()
		if !errors.Is(err, durable.ErrLocked) || !strings.Contains(err.Error(), "pid ") {
			t.Errorf("%s: got %v, want ErrLocked naming the holder", name, err)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("%s: waited for the lock instead of failing at once", name)
		}
	}
	if len(r.takeOrder()) != 0 {
		t.Errorf("hooks ran while the lock was held")
	}
}

func TestCorruptJournalIsNotTrusted(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"torn tail", func(b []byte) []byte { return append(b, []byte(`{"kind":"fluxvm-upgrade-journal","vers`)...) }},
		{"flipped byte", func(b []byte) []byte {
			i := strings.Index(string(b), `"step":"apply"`)
			b[i+9] = 'X'
			return b
		}},
		{"dropped record", func(b []byte) []byte {
			lines := strings.SplitAfter(string(b), "\n")
			return []byte(strings.Join(append(lines[:2:2], lines[3:]...), ""))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "a")
			p := r.plan("tx")
			crashAt(t, r.engine(), p, "step-done:a:apply")
			path := filepath.Join(TxDir(p), JournalFile)
			b, _ := os.ReadFile(path)
			if err := os.WriteFile(path, tc.damage(b), 0o600); err != nil {
				t.Fatal(err)
			}
			r.takeOrder()
			_, err := r.engine().Resume(context.Background(), p)
			if !errors.Is(err, ErrJournalCorrupt) {
				t.Errorf("Resume: got %v, want ErrJournalCorrupt", err)
			}
			if _, err := ReadStatus(TxDir(p)); !errors.Is(err, ErrJournalCorrupt) {
				t.Errorf("ReadStatus: got %v, want ErrJournalCorrupt", err)
			}
			if o := r.takeOrder(); len(o) != 0 {
				t.Errorf("hooks ran on a corrupt journal: %v", o)
			}
		})
	}
}

// errCrash simulates the process dying right after a journal record: the panic unwinds without
// running any further step (deferred lock release stands in for the kernel dropping the flock).
type errCrash struct{ key string }

func crashAt(t *testing.T, e *Engine, p *Plan, key string) {
	t.Helper()
	e.AfterRecord = func(k string) {
		if k == key {
			panic(errCrash{k})
		}
	}
	defer func() {
		if v := recover(); v == nil {
			t.Fatalf("failpoint %s never reached", key)
		} else if _, ok := v.(errCrash); !ok {
			panic(v)
		}
	}()
	e.Run(context.Background(), p)
}

func TestStatusJSON(t *testing.T) {
	r := newRig(t, "a")
	p := r.plan("tx")
	crashAt(t, r.engine(), p, "step-start:a:health")
	st, err := ReadStatus(TxDir(p))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st)
	var m map[string]any
	json.Unmarshal(b, &m)
	for _, k := range []string{"transaction_id", "plan_sha256", "state", "components"} {
		if _, ok := m[k]; !ok {
			t.Errorf("status JSON lacks %q: %s", k, b)
		}
	}
	if st.State != StateRunning || st.PlanSHA256 != p.SHA256 || st.TransactionID != "tx" {
		t.Errorf("status: got %s %s %s", st.State, st.PlanSHA256, st.TransactionID)
	}
	var outcomes []string
	for _, s := range st.Components[0].Steps {
		outcomes = append(outcomes, s.Step+"="+s.Outcome)
		if s.StartedAt != "" {
			if ts, err := time.Parse(time.RFC3339, s.StartedAt); err != nil || !strings.HasSuffix(s.StartedAt, "Z") || ts.IsZero() {
				t.Errorf("started_at %q is not UTC RFC 3339", s.StartedAt)
			}
		}
	}
	want := []string{"preflight=done", "snapshot=done", "apply=done", "restore=done", "health=running"}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Errorf("step outcomes (-want +got):\n%s", diff)
	}
}

func TestReconcile(t *testing.T) {
	r := newRig(t, "a")
	// stale: crashed after apply, lock free
	stale := r.plan("stale")
	crashAt(t, r.engine(), stale, "step-done:a:apply")
	// locked: crashed, but another process holds its lock
	locked := r.plan("locked")
	crashAt(t, r.engine(), locked, "step-done:a:apply")
	l, err := durable.Lock(LockPath(r.stateDir, "locked"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	// done: committed
	done := r.plan("done")
	if res, err := r.engine().Run(context.Background(), done); err != nil || res.State != StateCommitted {
		t.Fatal(res, err)
	}
	r.takeOrder()

	e := r.engine()
	e.Now = func() time.Time { return time.Now().Add(time.Minute) }
	res, err := e.Reconcile(context.Background(), r.stateDir, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, x := range res {
		got[x.TransactionID] = x.Action
	}
	if diff := cmp.Diff(map[string]string{"stale": "skipped-fresh", "locked": "skipped-fresh", "done": "skipped-terminal"}, got); diff != "" {
		t.Errorf("reconcile before stale (-want +got):\n%s", diff)
	}
	e.Now = func() time.Time { return time.Now().Add(time.Hour) }
	res, err = e.Reconcile(context.Background(), r.stateDir, 30*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got = map[string]string{}
	for _, x := range res {
		got[x.TransactionID] = x.Action + "/" + x.State
	}
	if diff := cmp.Diff(map[string]string{"stale": "rolled-back/rolled-back", "locked": "skipped-locked/", "done": "skipped-terminal/committed"}, got); diff != "" {
		t.Errorf("reconcile after stale (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a/rollback", "a/rollback_health"}, r.takeOrder()); diff != "" {
		t.Errorf("hooks (-want +got):\n%s", diff)
	}
	verifyEvidence(t, TxDir(stale))
}

func TestProbeAndPlanReports(t *testing.T) {
	r := newRig(t, "a")
	p := r.plan("tx")
	rep := r.engine().Probe(context.Background(), p)
	if !rep.OK {
		t.Errorf("probe: got %s, want OK", rep.Problems())
	}
	if len(rep.Maps) != 1 || rep.Maps[0].Live == nil || rep.Maps[0].Live.Entries != 2 || rep.Maps[0].Headroom == nil || *rep.Maps[0].Headroom != 2 {
		t.Errorf("probe map: got %+v, want 2 entries, headroom 2", rep.Maps)
	}
	// F11 at probe: merge on a per-CPU map is refused even if the plan did not declare the type
	if err := r.store.Create(r.pin("a"), bpfmap.ABI{Type: "PerCPUHash", KeySize: 1, ValueSize: 1, MaxEntries: 4}); err != nil {
		t.Fatal(err)
	}
	q, _ := ParsePlan("p", []byte(strings.Replace(r.planJSON("tx"), `"type":"hash",`, "", 1)))
	rep = r.engine().Probe(context.Background(), q)
	if len(rep.Maps) != 1 || !strings.Contains(rep.Maps[0].Refusal, "migration hook") {
		t.Errorf("probe on per-CPU map: got %+v, want a refusal pointing at migration hooks", rep.Maps)
	}
	pr := r.engine().Plan(context.Background(), p)
	var steps []string
	for _, s := range pr.Steps {
		steps = append(steps, s.Component+"/"+s.Step)
	}
	if diff := cmp.Diff([]string{"a/preflight", "a/snapshot", "a/apply", "a/restore", "a/health"}, steps); diff != "" {
		t.Errorf("plan steps (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(r.stateDir); err == nil {
		t.Errorf("plan/probe created the state dir; they must not mutate anything")
	}
	os.Chmod(filepath.Join(r.dir, "hooks", "a", "apply"), 0o644)
	if rep := r.engine().Probe(context.Background(), p); rep.OK || !strings.Contains(rep.Problems(), "not executable") {
		t.Errorf("probe with a non-executable hook: got %q, want a failure", rep.Problems())
	}
	// Run refuses when probe fails, and changes nothing.
	if _, err := r.engine().Run(context.Background(), q); !errors.Is(err, ErrProbeFailed) {
		t.Errorf("Run with failing probe: got %v, want ErrProbeFailed", err)
	}
}

// TestHooksRealExec runs hooks through the real argv runner: no shell unless the argv names one,
// context in the environment, bounded output in the transaction's log files, and a timeout that
// kills the hook.
func TestHooksRealExec(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	bpffs := filepath.Join(dir, "bpf")
	os.MkdirAll(bpffs, 0o755)
	env, _ := json.Marshal([]string{"/usr/bin/env"})
	loud, _ := json.Marshal([]string{"/bin/sh", "-c", "head -c 700000 /dev/zero | tr '\\\\0' x; echo; echo '$HOME $(id)' >&2"})
	slow, _ := json.Marshal([]string{"/bin/sleep", "30"})
	literal, _ := json.Marshal([]string{"/bin/echo", "$HOME", "*", "$(id)", "a;b"})
	plan := fmt.Sprintf(`{"transaction_id":"exec","state_dir":%q,"bpffs_root":%q,"components":[{"name":"c",
		"hooks":{"preflight":%s,"apply":%s,"health":{"argv":%s,"timeout_seconds":1},"rollback":%s,"rollback_health":%s}}]}`, state, bpffs, env, loud, slow, env, literal)
	p, err := ParsePlan("p", []byte(plan))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := (&Engine{Store: bpfmap.NewFake(), Runner: argv.Exec{}}).Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the 1s timeout did not stop a 30s hook (took %s)", d)
	}
	if res.State != StateRolledBack || !strings.Contains(res.Reason, "timed out") {
		t.Errorf("got %s (%s), want rolled-back after the health timeout", res.State, res.Reason)
	}
	logs := filepath.Join(TxDir(p), "logs")
	envLog, _ := os.ReadFile(filepath.Join(logs, "c.preflight.1.log"))
	for _, want := range []string{"FLUXVM_TRANSACTION_ID=exec", "FLUXVM_COMPONENT=c", "FLUXVM_STEP=preflight", "FLUXVM_SNAPSHOT_DIR=" + filepath.Join(TxDir(p), "snapshots", "c"), "FLUXVM_PLAN_SHA256=" + p.SHA256} {
		if !strings.Contains(string(envLog), want) {
			t.Errorf("preflight env lacks %s:\n%s", want, envLog)
		}
	}
	rbLog, _ := os.ReadFile(filepath.Join(logs, "c.rollback.1.log"))
	if !strings.Contains(string(rbLog), "FLUXVM_STEP=rollback") {
		t.Errorf("rollback hook log: %s", rbLog)
	}
	loudLog, _ := os.ReadFile(filepath.Join(logs, "c.apply.1.log"))
	if len(loudLog) > MaxHookOutput+4096 || !strings.Contains(string(loudLog), "truncated: true") {
		t.Errorf("apply log: %d bytes, want at most ~%d and marked truncated", len(loudLog), MaxHookOutput)
	}
	litLog, _ := os.ReadFile(filepath.Join(logs, "c.rollback-health.1.log"))
	if !strings.Contains(string(litLog), "$HOME * $(id) a;b\n") {
		t.Errorf("argv must reach the program unexpanded (no shell): log %s", litLog)
	}
	hLog, _ := os.ReadFile(filepath.Join(logs, "c.health.1.log"))
	if !strings.Contains(string(hLog), "timed out: true") {
		t.Errorf("health log: %s", hLog)
	}
	verifyEvidence(t, TxDir(p))
}

// TestInterruptLeavesTransactionResumable: a signal (context cancellation) during a hook is not
// a hook failure: the outcome stays unjournaled, as after a crash, and resume continues.
func TestInterruptLeavesTransactionResumable(t *testing.T) {
	for _, tc := range []struct {
		step      string
		wantState string
	}{{"health", StateCommitted}, {"apply", StateRolledBack}} {
		t.Run(tc.step, func(t *testing.T) {
			r := newRig(t, "a", "b")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r.effects["b/"+tc.step] = func(argv.Cmd) error {
				cancel()
				return errors.New("killed by signal")
			}
			p := r.plan("tx")
			res, err := r.engine().Run(ctx, p)
			if !errors.Is(err, ErrInterrupted) || res.State != StateRunning {
				t.Fatalf("Run interrupted: got %v %v, want ErrInterrupted and running", res.State, err)
			}
			st, _ := ReadStatus(TxDir(p))
			if got := st.Components[1].Steps; got[2].Outcome != map[string]string{"health": "done", "apply": "running"}[tc.step] {
				t.Errorf("steps after interrupt: %+v", got)
			}
			delete(r.effects, "b/"+tc.step)
			res, err = r.engine().Resume(context.Background(), p)
			if err != nil || res.State != tc.wantState {
				t.Errorf("Resume: got %s %v, want %s", res.State, err, tc.wantState)
			}
		})
	}
}

// TestRollbackRestoresOwnership needs root to hand a file to another owner.
func TestRollbackRestoresOwnership(t *testing.T) {
	testenv.RequireRoot(t)
	r := newRig(t, "a")
	f := filepath.Join(r.dir, "owned.conf")
	if err := os.WriteFile(f, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(f, 1234, 5678); err != nil {
		t.Fatal(err)
	}
	r.files["a"] = []string{f}
	r.effects["a/apply"] = func(argv.Cmd) error {
		os.Remove(f)
		if err := os.WriteFile(f, []byte("new"), 0o600); err != nil { // now root-owned
			return err
		}
		return nil
	}
	r.effects["a/health"] = func(argv.Cmd) error { return errors.New("unhealthy") }
	res, err := r.engine().Run(context.Background(), r.plan("tx"))
	if err != nil || res.State != StateRolledBack {
		t.Fatalf("Run: %v %v", res, err)
	}
	fi, err := os.Stat(f)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != 1234 || st.Gid != 5678 || fi.Mode().Perm() != 0o640 {
		t.Errorf("after rollback: got uid %d gid %d mode %v, want 1234 5678 -rw-r-----", st.Uid, st.Gid, fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(f); string(b) != "old" {
		t.Errorf("content: got %q, want old", b)
	}
}

func TestSnapshotRefusesDirectory(t *testing.T) {
	r := newRig(t, "a")
	d := filepath.Join(r.dir, "adir")
	os.Mkdir(d, 0o755)
	r.files["a"] = []string{d}
	p := r.plan("tx")
	if rep := r.engine().Probe(context.Background(), p); rep.OK {
		t.Errorf("probe: got OK for a directory in files[]")
	}
}

// TestRepairTornTail: only an unterminated last record (an append that never returned) is
// dropped, and only when asked; its bytes are kept and the repair is journaled.
func TestRepairTornTail(t *testing.T) {
	r := newRig(t, "a")
	p := r.plan("tx")
	crashAt(t, r.engine(), p, "step-done:a:apply")
	path := filepath.Join(TxDir(p), JournalFile)
	good, _ := os.ReadFile(path)
	torn := []byte(`{"kind":"fluxvm-upgrade-journal","version":1,"sha256":"ab`)
	os.WriteFile(path, append(append([]byte{}, good...), torn...), 0o600)

	_, err := r.engine().Resume(context.Background(), p)
	if !errors.Is(err, ErrJournalCorrupt) || !strings.Contains(err.Error(), "--repair-torn-tail") {
		t.Fatalf("Resume without repair: got %v, want ErrJournalCorrupt suggesting --repair-torn-tail", err)
	}
	e := r.engine()
	e.RepairTornTail = true
	res, err := e.Resume(context.Background(), p)
	if err != nil || res.State != StateCommitted {
		t.Fatalf("Resume with repair: got %v %v, want committed", res.State, err)
	}
	kept, _ := filepath.Glob(filepath.Join(TxDir(p), "journal.torn-*"))
	if len(kept) != 1 {
		t.Fatalf("kept torn bytes: got %v", kept)
	}
	if b, _ := os.ReadFile(kept[0]); string(b) != string(torn) {
		t.Errorf("kept bytes: got %q, want %q", b, torn)
	}
	evs, err := ReadJournal(TxDir(p))
	if err != nil {
		t.Fatal(err)
	}
	if !containsType(evs, EvJournalRepaired) {
		t.Errorf("journal does not record the repair")
	}
	verifyEvidence(t, TxDir(p))

	// Corruption inside the journal is never repaired.
	r2 := newRig(t, "a")
	p2 := r2.plan("tx")
	crashAt(t, r2.engine(), p2, "step-done:a:apply")
	path2 := filepath.Join(TxDir(p2), JournalFile)
	b, _ := os.ReadFile(path2)
	i := strings.Index(string(b), `"step":"snapshot"`)
	b[i+9] = 'X'
	os.WriteFile(path2, b, 0o600)
	e2 := r2.engine()
	e2.RepairTornTail = true
	if _, err := e2.Resume(context.Background(), p2); !errors.Is(err, ErrJournalCorrupt) {
		t.Errorf("Resume with repair over mid-journal corruption: got %v, want ErrJournalCorrupt", err)
	}
}

func containsType(evs []Event, typ string) bool {
	for _, e := range evs {
		if e.Type == typ {
			return true
		}
	}
	return false
}

// A hook log that cannot be created stops the engine before the step is journaled as started:
// the hook never ran, so resume runs it (and commits) instead of rolling back an apply that
// never began.
func TestHookLogFailureLeavesStepNotStarted(t *testing.T) {
	r := newRig(t, "a", "b")
	p := r.plan("tx")
	blocker := filepath.Join(TxDir(p), "logs", "b.apply.1.log")
	r.effects["b/preflight"] = func(argv.Cmd) error { return os.Mkdir(blocker, 0o700) } // a directory where the log goes
	res, err := r.engine().Run(context.Background(), p)
	if err == nil || !strings.Contains(err.Error(), "b.apply.1.log") || res.State != StateRunning {
		t.Fatalf("Run with an uncreatable hook log: got %s %v, want an error naming the log and a running transaction", res.State, err)
	}
	evs, err := ReadJournal(TxDir(p))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Component == "b" && ev.Step == StepApply {
			t.Fatalf("journal records %s of b/apply, whose hook never ran", ev.Type)
		}
	}
	if diff := cmp.Diff([]string{"a/preflight", "a/apply", "a/health", "b/preflight"}, r.takeOrder()); diff != "" {
		t.Errorf("hooks run before the stop (-want +got):\n%s", diff)
	}
	delete(r.effects, "b/preflight")
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	res, err = r.engine().Resume(context.Background(), p)
	if err != nil || res.State != StateCommitted {
		t.Fatalf("Resume once the log can be created: got %s %v, want committed", res.State, err)
	}
	if diff := cmp.Diff([]string{"b/apply", "b/health"}, r.takeOrder()); diff != "" {
		t.Errorf("hooks run by resume (-want +got):\n%s", diff)
	}
}

// probeRecorder is the fake store, recording whether each Probe asked for an entry count.
type probeRecorder struct {
	*bpfmap.Fake
	noCount []bool
}

func (s *probeRecorder) Probe(ctx context.Context, spec bpfmap.Spec) (bpfmap.Info, error) {
	s.noCount = append(s.noCount, spec.NoCount)
	return s.Fake.Probe(ctx, spec)
}

// Run's probe checks every map but does not count its entries (a full read of a large map that
// Run never uses); Probe and Plan still count, for the headroom they report.
func TestRunProbeDoesNotCountEntries(t *testing.T) {
	r := newRig(t, "a", "b")
	rec := &probeRecorder{Fake: r.store}
	e := r.engine()
	e.Store = rec
	p := r.plan("tx-nocount")
	if rep := e.Probe(context.Background(), p); !rep.OK || rep.Maps[0].Headroom == nil {
		t.Fatalf("Probe: got %+v, want OK with headroom", rep)
	}
	if diff := cmp.Diff([]bool{false, false}, rec.noCount); diff != "" {
		t.Errorf("Probe's store probes, NoCount (-want +got):\n%s", diff)
	}
	rec.noCount = nil
	res, err := e.Run(context.Background(), p)
	if err != nil || res.State != StateCommitted {
		t.Fatalf("Run: got %v %v, want committed", res.State, err)
	}
	if diff := cmp.Diff([]bool{true, true}, rec.noCount); diff != "" {
		t.Errorf("Run's store probes, NoCount (-want +got):\n%s", diff)
	}

	// Not counting does not skip the checks: a declared ABI the live map lacks still stops Run
	// before anything runs.
	rec.noCount = nil
	q, err := ParsePlan("p", []byte(strings.Replace(r.planJSON("tx-abi"), `"value_size":1`, `"value_size":2`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Run(context.Background(), q); !errors.Is(err, ErrProbeFailed) || !strings.Contains(err.Error(), "value_size: declared 2, live 1") {
		t.Errorf("Run with a wrong declared value_size: got %v, want ErrProbeFailed naming value_size", err)
	}
	if len(rec.noCount) == 0 || !rec.noCount[0] {
		t.Errorf("Run's probes of the second plan: NoCount %v, want true", rec.noCount)
	}
	if o := r.takeOrder(); len(o) != 6 {
		t.Errorf("hooks run: %v, want the 6 of the first run only", o)
	}
}
