package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/fluxvm/evidence"
	"zyvor.dev/sysbox/fluxvm/upgrade"
	"zyvor.dev/sysbox/internal/testenv"
)

// signedTx runs a signed transaction to committed and returns the world, the allowed_signers
// file and the transaction directory.
func signedTx(t *testing.T) (*world, string) {
	t.Helper()
	keygen := testenv.RequireBinary(t, "ssh-keygen")
	keys := t.TempDir()
	key := filepath.Join(keys, "upgrade-signing-key")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", "release", "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, _ := os.ReadFile(key + ".pub")
	allowed := filepath.Join(keys, "allowed_signers")
	if err := os.WriteFile(allowed, []byte(`release@zyvor.dev namespaces="fluxvm-upgrade" `+string(pub)), 0o644); err != nil {
		t.Fatal(err)
	}
	w := newWorldOpts(t, worldOpts{signingKey: key})
	if r := w.run("", "run", w.plan); r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	return w, allowed
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	return dst
}

// forgeJournal appends a record to the journal and rewrites EVIDENCE.sha256 to match, as an
// attacker with write access to the transaction directory (but not the signing key) would.
func forgeJournal(t *testing.T, dir string) {
	t.Helper()
	sig := filepath.Join(dir, evidence.SignatureFile)
	saved, err := os.ReadFile(sig)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(sig) // Write leaves the signature alone; move it aside so the forgery is the only change
	f, err := os.OpenFile(filepath.Join(dir, "journal.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("forged record\n")
	f.Close()
	if _, err := evidence.Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sig, saved, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestForgedEvidenceFailsClosed is the attack of issue #18 and its variants: every signature
// outcome but "ssh-keygen accepted exactly this manifest for this identity and namespace" exits 9
// with the reason, and so does any symlink or special file in the directory.
func TestForgedEvidenceFailsClosed(t *testing.T) {
	w, allowed := signedTx(t)
	check := []string{"--allowed-signers", allowed, "--identity", "release@zyvor.dev", "--namespace", "fluxvm-upgrade"}
	sigName := evidence.SignatureFile
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		args   []string // verify-evidence flags (default: the full signature check)
		code   int
		want   string // in stdout+stderr
	}{
		{"untouched", func(*testing.T, string) {}, nil, 0, "signature: valid"},
		{"untouched without allowed signers", func(*testing.T, string) {}, []string{}, 0, "signature: not-checked"},
		{"forged journal, rewritten manifest, signature symlinked to itself", func(t *testing.T, d string) {
			forgeJournal(t, d)
			os.Remove(filepath.Join(d, sigName))
			if err := os.Symlink(sigName, filepath.Join(d, sigName)); err != nil {
				t.Fatal(err)
			}
		}, nil, exitEvidence, "symlink"},
		{"forged journal, rewritten manifest, old signature", func(t *testing.T, d string) { forgeJournal(t, d) }, nil, exitEvidence, "signature: invalid"},
		{"signature removed", func(t *testing.T, d string) { os.Remove(filepath.Join(d, sigName)) }, nil, exitEvidence, "signature: missing"},
		{"signature removed, plan had signing, no allowed signers", func(t *testing.T, d string) { os.Remove(filepath.Join(d, sigName)) }, []string{}, exitEvidence, "signature: missing"},
		{"signature is a directory", func(t *testing.T, d string) {
			os.Remove(filepath.Join(d, sigName))
			os.Mkdir(filepath.Join(d, sigName), 0o700)
		}, nil, exitEvidence, "signature"},
		{"signature is a symlink to a valid copy", func(t *testing.T, d string) {
			cp := filepath.Join(t.TempDir(), "sig")
			os.WriteFile(cp, mustRead(filepath.Join(d, sigName)), 0o644)
			os.Remove(filepath.Join(d, sigName))
			os.Symlink(cp, filepath.Join(d, sigName))
		}, nil, exitEvidence, "symlink"},
		{"signature is a FIFO", func(t *testing.T, d string) {
			os.Remove(filepath.Join(d, sigName))
			if err := syscall.Mkfifo(filepath.Join(d, sigName), 0o600); err != nil {
				t.Fatal(err)
			}
		}, nil, exitEvidence, "FIFO"},
		{"signature empty", func(t *testing.T, d string) { os.WriteFile(filepath.Join(d, sigName), nil, 0o644) }, nil, exitEvidence, "empty"},
		{"signature malformed", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, sigName), []byte("-----BEGIN SSH SIGNATURE-----\nAAAA\n-----END SSH SIGNATURE-----\n"), 0o644)
		}, nil, exitEvidence, "signature: invalid"},
		{"wrong identity", func(*testing.T, string) {}, []string{"--allowed-signers", allowed, "--identity", "mallory@zyvor.dev"}, exitEvidence, "signature: invalid"},
		{"wrong namespace", func(*testing.T, string) {}, []string{"--allowed-signers", allowed, "--identity", "release@zyvor.dev", "--namespace", "other"}, exitEvidence, "signature: invalid"},
		{"allowed signers missing", func(*testing.T, string) {}, []string{"--allowed-signers", filepath.Join(w.dir, "nope"), "--identity", "release@zyvor.dev"}, exitEvidence, "signature: invalid"},
		{"identity without allowed signers", func(*testing.T, string) {}, []string{"--identity", "release@zyvor.dev"}, exitUsage, "--allowed-signers"},
		{"manifest is a symlink to a forged copy", func(t *testing.T, d string) {
			m := filepath.Join(d, evidence.ManifestFile)
			cp := filepath.Join(t.TempDir(), "m")
			os.WriteFile(cp, mustRead(m), 0o644)
			os.Remove(m)
			os.Symlink(cp, m)
		}, nil, exitEvidence, "symlink"},
		{"symlink among the logs", func(t *testing.T, d string) {
			os.Symlink("/etc/hostname", filepath.Join(d, "logs", "zz.log"))
		}, nil, exitEvidence, "symlink"},
		{"extra file", func(t *testing.T, d string) {
			os.WriteFile(filepath.Join(d, "logs", "injected.log"), []byte("x"), 0o600)
		}, nil, exitEvidence, "EXTRA    logs/injected.log"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, w.txDir())
			tc.tamper(t, dir)
			args := check
			if tc.args != nil {
				args = tc.args
			}
			r := w.run("", append([]string{"verify-evidence", dir}, args...)...)
			out := r.stdout + r.stderr
			if r.code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("verify-evidence %v: exit %d, want %d with %q:\n%s", args, r.code, tc.code, tc.want, out)
			}
			if tc.code != 0 && strings.Contains(out, "evidence OK") {
				t.Errorf("says evidence OK although it exits %d:\n%s", r.code, out)
			}
		})
	}
}

// TestEvidencePendingIsNotFinished: killed between the terminal journal record and the
// evidence, status says EVIDENCE PENDING (words, JSON, exit 13), verify-evidence says to run
// resume, and reconcile writes the evidence.
func TestEvidencePendingIsNotFinished(t *testing.T) {
	for _, fp := range []string{"end", "final:journal.final.json"} {
		t.Run(fp, func(t *testing.T) {
			w := newWorld(t, "gamma")
			if r := w.run(fp, "run", w.plan); !r.signaled {
				t.Fatalf("failpoint %s not hit: exit %d: %s", fp, r.code, r.stderr)
			}
			r := w.run("", "status", w.plan)
			if r.code != exitEvidencePending || !strings.Contains(r.stdout, "ROLLED-BACK") || !strings.Contains(r.stdout, "EVIDENCE PENDING") || !strings.Contains(r.stdout, "resume") {
				t.Errorf("status: exit %d, want %d and EVIDENCE PENDING:\n%s%s", r.code, exitEvidencePending, r.stdout, r.stderr)
			}
			r = w.run("", "status", "--json", w.plan)
			if r.code != exitEvidencePending || !strings.Contains(r.stdout, `"state": "pending"`) {
				t.Errorf("status --json: exit %d, want %d with evidence state pending:\n%s", r.code, exitEvidencePending, r.stdout)
			}
			r = w.run("", "verify-evidence", w.txDir())
			if r.code != exitEvidence || !strings.Contains(r.stderr, "evidence not written yet; run resume") {
				t.Errorf("verify-evidence: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
			}
			// The transaction is terminal and its lock free: reconcile finishes it whatever the age.
			r = w.run("", "reconcile", "--state-dir", w.state, "--stale-minutes", "15")
			if r.code != 0 {
				t.Errorf("reconcile: exit %d: %s%s", r.code, r.stdout, r.stderr)
			}
			w.checkConverged("rolled-back")
			if r := w.run("", "status", w.plan); r.code != 0 || !strings.Contains(r.stdout, "evidence: complete") {
				t.Errorf("status after reconcile: exit %d:\n%s", r.code, r.stdout)
			}
		})
	}
}

// TestHookLogStreamsAndSurvivesSIGKILL: a hook's output reaches its log while it runs, with a
// timestamp, and stays there when the manager is killed with SIGKILL mid-hook.
func TestHookLogStreamsAndSurvivesSIGKILL(t *testing.T) {
	wait := filepath.Join(t.TempDir(), "go")
	w := newWorldOpts(t, worldOpts{waitFile: wait})
	cmd := w.startRunInPreflight(t)
	released := false
	release := func() {
		if !released {
			released = true
			os.WriteFile(wait, nil, 0o600) // let the orphaned hook finish
		}
	}
	defer release()
	logPath := filepath.Join(w.txDir(), "logs", "alpha.preflight.1.log")
	line := regexp.MustCompile(`(?m)^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z stdout\| hook alpha/preflight starting$`)
	deadline := time.Now().Add(20 * time.Second)
	for !line.Match(mustRead(logPath)) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the hook's first line never reached %s while it ran:\n%s", logPath, mustRead(logPath))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill() // SIGKILL of the manager, mid-hook
	cmd.Wait()
	if b := mustRead(logPath); !line.Match(b) || !strings.HasPrefix(string(b), "# argv: ") {
		t.Errorf("after SIGKILL the partial log is gone or changed:\n%s", b)
	}
	release()
	// Once the orphaned hook is gone, recovery works and keeps the partial log.
	deadline = time.Now().Add(20 * time.Second)
	for {
		r := w.run("", "rollback", w.plan)
		if r.code == exitRolledBack {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollback after SIGKILL: exit %d: %s", r.code, r.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !line.Match(mustRead(logPath)) {
		t.Errorf("the partial log did not survive recovery")
	}
	w.checkConverged("rolled-back")
}

// TestRollbackRetry: beta's rollback hook fails (manual-intervention); after the cause is
// removed, rollback --retry re-runs only beta's failed rollback steps, journals the retry, keeps
// the failed attempt in the evidence and ends rolled-back.
func TestRollbackRetry(t *testing.T) {
	w := newWorld(t, "gamma")
	cause := filepath.Join(w.work, "fail-rollback.beta")
	if err := os.WriteFile(cause, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := w.run("", "run", w.plan); r.code != exitManualIntervention {
		t.Fatalf("run: exit %d, want %d: %s", r.code, exitManualIntervention, r.stderr)
	}
	if r := w.run("", "rollback", "--retry", w.plan); r.code != exitManualIntervention {
		t.Errorf("retry with the cause still there: exit %d, want %d: %s", r.code, exitManualIntervention, r.stderr)
	}
	os.Remove(cause)
	before := w.hookOrder()
	r := w.run("", "rollback", "--retry", w.plan)
	if r.code != exitRolledBack {
		t.Fatalf("rollback --retry: exit %d, want %d: %s%s", r.code, exitRolledBack, r.stdout, r.stderr)
	}
	if got := strings.Join(w.hookOrder()[len(before):], " "); got != "beta/rollback beta/rollback-health" {
		t.Errorf("retry ran hooks %q, want only beta's failed rollback and its rollback-health", got)
	}
	st := w.status()
	if st.State != "rolled-back" || !strings.Contains(st.Reason, "retried 2 time(s)") {
		t.Errorf("status: %s (%s)", st.State, st.Reason)
	}
	evs := strings.Join(mustReadJournalTypes(t, w), " ")
	if strings.Count(evs, "rollback-retry") != 2 || strings.Count(evs, "step-failed:beta:rollback") != 2 {
		t.Errorf("journal does not keep both failed attempts and both retries: %s", evs)
	}
	for _, f := range []string{"logs/beta.rollback.1.log", "logs/beta.rollback.3.log", "journal.final.manual-intervention-1.json", "journal.final.manual-intervention-2.json"} {
		if _, err := os.Stat(filepath.Join(w.txDir(), f)); err != nil {
			t.Errorf("failed attempt not kept: %v", err)
		}
	}
	manifest := string(mustRead(filepath.Join(w.txDir(), evidence.ManifestFile)))
	if !strings.Contains(manifest, "journal.final.manual-intervention-1.json") || !strings.Contains(manifest, "logs/beta.rollback.1.log") {
		t.Errorf("evidence does not cover the failed attempt:\n%s", manifest)
	}
	if r := w.run("", "verify-evidence", w.txDir()); r.code != 0 {
		t.Errorf("verify-evidence: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range w.comps {
		if got := w.fakeMap("dump", filepath.Join(w.bpf, c, "m")); !strings.Contains(got, `"entries":{"01":"0a","02":"0b"}`) {
			t.Errorf("%s map after retry: %s", c, got)
		}
		w.checkFile(c+".conf", "old config of "+c+"\n", 0o640)
	}
	if r := w.run("", "rollback", "--retry", w.plan); r.code != exitTxState {
		t.Errorf("retry of a rolled-back transaction: exit %d, want %d: %s", r.code, exitTxState, r.stderr)
	}
}

func mustReadJournalTypes(t *testing.T, w *world) []string {
	t.Helper()
	evs, err := upgrade.ReadJournal(w.txDir())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Key())
	}
	return out
}

// TestProbeTakesNoLock: probe reports a held lock, and when the lock is free it never takes it
// (taking it would also rewrite the holder line in the lock file, which is checked here).
func TestProbeTakesNoLock(t *testing.T) {
	w := newWorld(t, "")
	lock := filepath.Join(w.state, "crash-tx.lock")
	if err := os.MkdirAll(w.state, 0o700); err != nil {
		t.Fatal(err)
	}
	const sentinel = "pid 1 (not a real holder) since 2026-01-01T00:00:00Z\n"
	if err := os.WriteFile(lock, []byte(sentinel), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := w.run("", "probe", w.plan); r.code != 0 {
		t.Fatalf("probe with a free lock: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if got := string(mustRead(lock)); got != sentinel {
		t.Errorf("probe took the lock (the holder line was rewritten to %q)", got)
	}
	f, err := os.OpenFile(lock, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	r := w.run("", "probe", w.plan)
	if r.code != exitProbeFailed || !strings.Contains(r.stdout, "transaction lock free") || !strings.Contains(r.stdout, "not a real holder") {
		t.Errorf("probe with the lock held: exit %d, want %d naming the holder:\n%s%s", r.code, exitProbeFailed, r.stdout, r.stderr)
	}
}
