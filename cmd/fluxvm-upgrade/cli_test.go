package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/fluxvm/upgrade"
)

func TestHelpOnEveryCommand(t *testing.T) {
	w := newWorld(t, "")
	for _, cmd := range []string{"", "validate", "probe", "plan", "run", "resume", "rollback", "status", "reconcile", "verify-evidence"} {
		args := []string{"--help"}
		if cmd != "" {
			args = []string{cmd, "--help"}
		}
		r := w.run("", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("%s --help: exit %d, output %q", cmd, r.code, r.stdout)
		}
	}
	if r := w.run("", "frobnicate"); r.code != exitUsage {
		t.Errorf("unknown command: got exit %d, want %d", r.code, exitUsage)
	}
}

func TestValidateExitCodes(t *testing.T) {
	w := newWorld(t, "")
	if r := w.run("", "validate", w.plan); r.code != 0 || !strings.Contains(r.stdout, "valid plan") {
		t.Errorf("valid plan: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	bad := filepath.Join(w.dir, "bad.json")
	os.WriteFile(bad, []byte(`{"transaction_id":"../x","components":[{"name":"a","hooks":{"apply":"rm -rf /"},"maps":[{"name":"m","pin":"/etc/m","policy":"copy"}]}],"extra":1}`), 0o644)
	r := w.run("", "validate", bad)
	if r.code != exitInvalidPlan {
		t.Fatalf("invalid plan: got exit %d, want %d", r.code, exitInvalidPlan)
	}
	for _, want := range []string{"$.transaction_id", "$.extra", "$.components[0].hooks.apply", "$.components[0].hooks.preflight", "$.components[0].maps[0].pin", "$.components[0].maps[0].policy", "bad.json:1:"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("validate output lacks %q:\n%s", want, r.stderr)
		}
	}
	r = w.run("", "validate", "--json", bad)
	var out struct {
		Valid    bool
		Problems []upgrade.Problem
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Valid || len(out.Problems) < 6 || r.code != exitInvalidPlan {
		t.Errorf("validate --json: exit %d, %v, %+v", r.code, err, out)
	}
	for _, cmd := range []string{"probe", "plan", "run", "resume", "rollback", "status"} {
		if r := w.run("", cmd, bad); r.code != exitInvalidPlan {
			t.Errorf("%s on invalid plan: got exit %d, want %d", cmd, r.code, exitInvalidPlan)
		}
	}
}

func TestRunStatusAndExitCodes(t *testing.T) {
	w := newWorld(t, "")
	if r := w.run("", "probe", w.plan); r.code != 0 {
		t.Fatalf("probe: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	r := w.run("", "plan", w.plan)
	if r.code != 0 || !strings.Contains(r.stdout, "policy=merge") || !strings.Contains(r.stdout, "entries=2") || !strings.Contains(r.stdout, "headroom=6") {
		t.Errorf("plan: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(w.state); err == nil {
		t.Errorf("plan/probe created the state dir")
	}
	r = w.run("", "run", w.plan)
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r.stderr != "" {
		t.Errorf("run wrote to stderr although it is not a terminal (progress only on a TTY): %q", r.stderr)
	}
	w.checkConverged(upgrade.StateCommitted)
	r = w.run("", "status", "--json", w.plan)
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"transaction_id", "plan_sha256", "state", "components"} {
		if m[k] == nil {
			t.Errorf("status --json lacks %s", k)
		}
	}
	if m["state"] != "committed" {
		t.Errorf("status state: got %v", m["state"])
	}
	r = w.run("", "status", "--dir", w.txDir())
	if r.code != 0 || !strings.Contains(r.stdout, "COMMITTED") || !strings.Contains(r.stdout, "done     apply   ") {
		t.Errorf("status (human): exit %d:\n%s", r.code, r.stdout)
	}
	r = w.run("", "status", "--state-dir", w.state)
	if r.code != 0 || !strings.Contains(r.stdout, "crash-tx") || !strings.Contains(r.stdout, "committed") {
		t.Errorf("status --state-dir: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := w.run("", "run", w.plan); r.code != exitTxState {
		t.Errorf("second run: got exit %d, want %d", r.code, exitTxState)
	}
	if r := w.run("", "rollback", w.plan); r.code != exitTxState {
		t.Errorf("rollback of committed: got exit %d, want %d", r.code, exitTxState)
	}
	// verify-evidence detects tampering
	os.WriteFile(filepath.Join(w.txDir(), "logs", "extra.log"), []byte("x"), 0o600)
	r = w.run("", "verify-evidence", w.txDir())
	if r.code != exitEvidence || !strings.Contains(r.stdout, "EXTRA    logs/extra.log") {
		t.Errorf("verify-evidence with an extra file: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

func TestRolledBackAndManualInterventionExitCodes(t *testing.T) {
	w := newWorldOpts(t, worldOpts{failHealth: "beta"})
	if r := w.run("", "run", w.plan); r.code != exitRolledBack {
		t.Errorf("run with failing health: got exit %d, want %d: %s", r.code, exitRolledBack, r.stderr)
	}
	w.checkConverged(upgrade.StateRolledBack)

	w = newWorldOpts(t, worldOpts{failHealth: "beta", failRollback: "alpha"})
	r := w.run("", "run", w.plan)
	if r.code != exitManualIntervention || !strings.Contains(r.stdout, "alpha: rollback") {
		t.Errorf("run with failing rollback: got exit %d, want %d: %s%s", r.code, exitManualIntervention, r.stdout, r.stderr)
	}
	if st := w.status(); st.State != upgrade.StateManualIntervention {
		t.Errorf("status: got %s", st.State)
	}
	if r := w.run("", "verify-evidence", w.txDir()); r.code != 0 {
		t.Errorf("evidence of manual-intervention: exit %d: %s", r.code, r.stdout)
	}
}

func TestPlanModifiedAndLockHeld(t *testing.T) {
	wait := filepath.Join(t.TempDir(), "go")
	w := newWorldOpts(t, worldOpts{waitFile: wait})
	cmd := w.startRunInPreflight(t) // the first process is inside alpha's preflight hook
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for _, args := range [][]string{{"resume", w.plan}, {"rollback", w.plan}, {"run", w.plan}} {
		start := time.Now()
		r := w.run("", args...)
		if r.code != exitLocked || !strings.Contains(r.stderr, "pid ") {
			t.Errorf("%s while locked: exit %d, want %d naming the holder: %s", args[0], r.code, exitLocked, r.stderr)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("%s waited %s for the lock instead of failing at once", args[0], d)
		}
	}
	// reconcile leaves the locked transaction alone
	r := w.run("", "reconcile", "--state-dir", w.state, "--stale-minutes", "0")
	if r.code != 0 || !strings.Contains(r.stdout, "skipped-locked") {
		t.Errorf("reconcile of a locked transaction: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	os.WriteFile(wait, nil, 0o644)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("first run: %v", err)
	}
	// modify the plan semantically: resume and rollback refuse, printing both hashes
	b, _ := os.ReadFile(w.plan)
	os.WriteFile(w.plan, []byte(strings.Replace(string(b), `"policy":"merge"`, `"policy":"replace"`, 1)), 0o644)
	for _, c := range []string{"resume", "rollback"} {
		r := w.run("", c, w.plan)
		if r.code != exitPlanModified || strings.Count(r.stderr, "sha256") < 2 {
			t.Errorf("%s with a modified plan: exit %d, want %d with both hashes: %s", c, r.code, exitPlanModified, r.stderr)
		}
	}
	// whitespace-only changes keep the canonical hash
	os.WriteFile(w.plan, []byte(strings.ReplaceAll(string(b), ",", " ,\n ")), 0o644)
	if r := w.run("", "resume", w.plan); r.code != 0 {
		t.Errorf("resume with a reformatted plan: exit %d: %s", r.code, r.stderr)
	}
}

func mustRead(p string) []byte {
	b, _ := os.ReadFile(p)
	return b
}

func TestSignedEvidence(t *testing.T) {
	w, allowed := signedTx(t)
	key := w.signingKey
	if _, err := os.Stat(filepath.Join(w.txDir(), "EVIDENCE.sha256.sig")); err != nil {
		t.Fatal(err)
	}
	// the private key is referenced, never copied
	keyBytes, _ := os.ReadFile(key)
	filepath.Walk(w.txDir(), func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && strings.Contains(string(mustRead(p)), strings.TrimSpace(string(keyBytes))[40:120]) {
			t.Errorf("%s contains the private key", p)
		}
		return nil
	})
	r := w.run("", "verify-evidence", w.txDir(), "--allowed-signers", allowed, "--identity", "release@zyvor.dev", "--namespace", "fluxvm-upgrade")
	if r.code != 0 || !strings.Contains(r.stdout, "signature: valid") {
		t.Errorf("verify good signature: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	r = w.run("", "verify-evidence", w.txDir(), "--allowed-signers", allowed, "--identity", "mallory@zyvor.dev")
	if r.code != exitEvidence {
		t.Errorf("verify wrong identity: exit %d, want %d: %s", r.code, exitEvidence, r.stdout)
	}
}

func TestProbeFailureExitCode(t *testing.T) {
	w := newWorld(t, "")
	// remove beta's pin: probe and run must refuse without changing anything
	b, _ := os.ReadFile(w.plan)
	os.WriteFile(w.plan, []byte(strings.Replace(string(b), `"pin":"beta/m"`, `"pin":"beta/missing"`, 1)), 0o644)
	r := w.run("", "probe", w.plan)
	if r.code != exitProbeFailed || !strings.Contains(r.stdout, "FAIL $.components[1].maps[0]") {
		t.Errorf("probe: exit %d: %s", r.code, r.stdout)
	}
	r = w.run("", "run", w.plan)
	if r.code != exitProbeFailed {
		t.Errorf("run: exit %d, want %d: %s", r.code, exitProbeFailed, r.stderr)
	}
	if len(w.hookOrder()) != 0 {
		t.Errorf("hooks ran although probe failed: %v", w.hookOrder())
	}
}

func TestCorruptJournalExitCode(t *testing.T) {
	w := newWorld(t, "")
	if r := w.run("step-done:beta:apply", "run", w.plan); !r.signaled {
		t.Fatalf("failpoint not hit: exit %d", r.code)
	}
	journal := filepath.Join(w.txDir(), "journal.log")
	b, _ := os.ReadFile(journal)
	os.WriteFile(journal, b[:len(b)-10], 0o600) // torn tail
	before := len(w.hookOrder())
	for _, args := range [][]string{{"resume", w.plan}, {"rollback", w.plan}, {"status", w.plan}} {
		r := w.run("", args...)
		if r.code != exitJournalCorrupt || !strings.Contains(r.stderr, "corrupt") {
			t.Errorf("%s on a torn journal: exit %d, want %d: %s", args[0], r.code, exitJournalCorrupt, r.stderr)
		}
	}
	r := w.run("", "reconcile", "--state-dir", w.state, "--stale-minutes", "0")
	if r.code != exitError || !strings.Contains(r.stdout, "crash-tx: error") {
		t.Errorf("reconcile on a torn journal: exit %d: %s", r.code, r.stdout)
	}
	if after := len(w.hookOrder()); after != before {
		t.Errorf("hooks ran on a corrupt journal: %v", w.hookOrder()[before:])
	}
	if !strings.Contains(w.run("", "resume", w.plan).stderr, "--repair-torn-tail") {
		t.Errorf("the torn-tail report does not point at --repair-torn-tail")
	}
	// After a reviewed power-loss tear, the operator repairs and converges. The torn record was
	// beta's apply step-done, so beta's apply is in doubt: the transaction rolls back.
	if r := w.run("", "resume", "--repair-torn-tail", w.plan); r.code != exitRolledBack {
		t.Fatalf("resume --repair-torn-tail: exit %d, want %d: %s", r.code, exitRolledBack, r.stderr)
	}
	w.checkConverged(upgrade.StateRolledBack)
}

func TestSIGTERMLeavesTransactionRunning(t *testing.T) {
	wait := filepath.Join(t.TempDir(), "never")
	w := newWorldOpts(t, worldOpts{waitFile: wait})
	cmd := w.startRunInPreflight(t)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	if cmd.ProcessState.ExitCode() != exitRunning {
		t.Fatalf("run after SIGTERM: %v (exit %d), want exit %d", err, cmd.ProcessState.ExitCode(), exitRunning)
	}
	if st := w.status(); st.State != upgrade.StateRunning {
		t.Errorf("state after SIGTERM: got %s, want running", st.State)
	}
	os.WriteFile(wait, nil, 0o644)
	if r := w.run("", "resume", w.plan); r.code != 0 {
		t.Errorf("resume: exit %d: %s", r.code, r.stderr)
	}
	w.checkConverged(upgrade.StateCommitted)
}

// TestOrphanedHookBlocksRecovery: SIGKILL of the engine does not kill a hook running in its own
// process group. Until that hook ends, resume/rollback/reconcile treat the transaction as locked.
func TestOrphanedHookBlocksRecovery(t *testing.T) {
	wait := filepath.Join(t.TempDir(), "release")
	t.Cleanup(func() { os.WriteFile(wait, nil, 0o644) }) // never leave the hook looping
	w := newWorldOpts(t, worldOpts{waitFile: wait})
	cmd := w.startRunInPreflight(t)
	cmd.Process.Kill() // the engine dies mid-hook; the hook lives on
	cmd.Wait()
	for _, args := range [][]string{{"resume", w.plan}, {"rollback", w.plan}} {
		r := w.run("", args...)
		if r.code != exitLocked || !strings.Contains(r.stderr, "still running") || !strings.Contains(r.stderr, "component alpha, step preflight") {
			t.Errorf("%s beside an orphaned hook: exit %d, want %d: %s", args[0], r.code, exitLocked, r.stderr)
		}
	}
	if r := w.run("", "reconcile", "--state-dir", w.state, "--stale-minutes", "0"); !strings.Contains(r.stdout, "skipped-locked") {
		t.Errorf("reconcile beside an orphaned hook: %s", r.stdout)
	}
	os.WriteFile(wait, nil, 0o644)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := w.run("", "resume", w.plan)
		if r.code == 0 {
			break
		}
		if r.code != exitLocked || time.Now().After(deadline) {
			t.Fatalf("resume after the hook ended: exit %d: %s", r.code, r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	w.checkConverged(upgrade.StateCommitted)
}
