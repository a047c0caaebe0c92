package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/fluxvm/upgrade"
	"zyvor.dev/sysbox/internal/testenv"
)

// The harness builds the real binary with -tags fluxvmtest (fake file-backed map store, SIGKILL
// failpoints, fake-map helper) once per test process.
var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func testBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fluxvm-upgrade-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "fluxvm-upgrade")
		buildErr = testenv.GoBuild(".", binPath, "fluxvmtest")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// hookScript is one hook for every component and step. It appends "component/step" to the
// order log, and acts like a component: apply rewrites its config, creates a new file and
// recreates its map (empty, plus one new entry); rollback recreates the old map empty; health
// checks the map holds the restored entries and fails for the component named in $FAIL_HEALTH.
const hookScript = `#!/bin/sh
set -eu
bin=$1 fake=$2 order=$3 work=$4 fail=$5 wait=${6:-} failrb=${7:-}
c=$FLUXVM_COMPONENT
pin=$FLUXVM_BPFFS_ROOT/$c/m
echo "$c/$FLUXVM_STEP" >> "$order"
echo "hook $c/$FLUXVM_STEP starting"
case $FLUXVM_STEP in
preflight)
	if [ -n "$wait" ]; then while [ ! -e "$wait" ]; do sleep 0.05; done; fi
	;;
apply)
	printf 'new config of %s\n' "$c" > "$work/$c.conf"
	chmod 0600 "$work/$c.conf"
	if [ "$(id -u)" = 0 ]; then chown 65534:65534 "$work/$c.conf"; fi
	rm -f "$work/$c.removed"
	echo created > "$work/$c.created"
	"$bin" fake-map --state "$fake" create "$pin" --type Hash --key-size 1 --value-size 1 --max-entries 8
	"$bin" fake-map --state "$fake" put "$pin" 03 00
	;;
rollback)
	[ "$c" != "$failrb" ]
	[ ! -e "$work/fail-rollback.$c" ]
	"$bin" fake-map --state "$fake" create "$pin" --type Hash --key-size 1 --value-size 1 --max-entries 8
	;;
health)
	"$bin" fake-map --state "$fake" dump "$pin" | grep -q '"01":"0a"'
	[ "$c" != "$fail" ]
	;;
esac
`

type world struct {
	t     *testing.T
	bin   string
	dir   string
	state string
	bpf   string
	fake  string
	order string
	work  string
	plan  string
	comps []string
	// signingKey is the plan's signing key, if any.
	signingKey string
}

// worldOpts varies the hooks and plan: which component's health or rollback fails, a file the
// preflight hooks wait for, and a signing block.
type worldOpts struct {
	failHealth, waitFile, failRollback string
	signingKey                         string
}

func newWorld(t *testing.T, failHealth string) *world {
	return newWorldOpts(t, worldOpts{failHealth: failHealth})
}

func newWorldOpts(t *testing.T, o worldOpts) *world {
	t.Helper()
	w := &world{t: t, bin: testBinary(t), dir: t.TempDir(), comps: []string{"alpha", "beta", "gamma"}}
	w.state = filepath.Join(w.dir, "state")
	w.bpf = filepath.Join(w.dir, "bpf")
	w.fake = filepath.Join(w.dir, "fake-bpf.json")
	w.order = filepath.Join(w.dir, "order.log")
	w.work = filepath.Join(w.dir, "etc")
	for _, d := range []string{w.bpf, w.work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hook := filepath.Join(w.dir, "hook.sh")
	if err := os.WriteFile(hook, []byte(hookScript), 0o755); err != nil {
		t.Fatal(err)
	}
	var comps []string
	for _, c := range w.comps {
		pin := filepath.Join(w.bpf, c, "m")
		w.fakeMap("create", pin, "--type", "Hash", "--key-size", "1", "--value-size", "1", "--max-entries", "8")
		w.fakeMap("put", pin, "01", "0a")
		w.fakeMap("put", pin, "02", "0b")
		if err := os.WriteFile(filepath.Join(w.work, c+".conf"), []byte("old config of "+c+"\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		// a file the apply deletes; the umask must not decide its mode
		if err := os.WriteFile(filepath.Join(w.work, c+".removed"), []byte("removed file of "+c+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(filepath.Join(w.work, c+".removed"), 0o604); err != nil {
			t.Fatal(err)
		}
		argv, _ := json.Marshal([]string{hook, w.bin, w.fake, w.order, w.work, o.failHealth, o.waitFile, o.failRollback})
		hooks := fmt.Sprintf(`{"preflight":%[1]s,"apply":%[1]s,"health":%[1]s,"rollback":%[1]s,"rollback_health":%[1]s}`, argv)
		comps = append(comps, fmt.Sprintf(`{"name":%q,"hooks":%s,"files":[%q,%q,%q],"maps":[{"name":"m","pin":"%s/m","policy":"merge","type":"Hash","key_size":1,"value_size":1}]}`,
			c, hooks, filepath.Join(w.work, c+".conf"), filepath.Join(w.work, c+".created"), filepath.Join(w.work, c+".removed"), c))
	}
	signing := ""
	w.signingKey = o.signingKey
	if o.signingKey != "" {
		signing = fmt.Sprintf(`,"signing":{"ssh_private_key":%q,"namespace":"fluxvm-upgrade"}`, o.signingKey)
	}
	plan := fmt.Sprintf(`{"transaction_id":"crash-tx","state_dir":%q,"bpffs_root":%q,"components":[%s]%s}`, w.state, w.bpf, strings.Join(comps, ","), signing)
	w.plan = filepath.Join(w.dir, "plan.json")
	if err := os.WriteFile(w.plan, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

func (w *world) fakeMap(args ...string) string {
	w.t.Helper()
	out, err := exec.Command(w.bin, append([]string{"fake-map", "--state", w.fake}, args...)...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("fake-map %v: %v\n%s", args, err, out)
	}
	return string(out)
}

type runResult struct {
	code     int
	signaled bool
	stdout   string
	stderr   string
}

func (w *world) run(failpoint string, args ...string) runResult {
	w.t.Helper()
	cmd := exec.Command(w.bin, args...)
	cmd.Env = append(os.Environ(), "FLUXVM_UPGRADE_TEST_FAKE_BPF="+w.fake)
	if failpoint != "" {
		cmd.Env = append(cmd.Env, "FLUXVM_UPGRADE_TEST_FAILPOINT="+failpoint)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := runResult{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
		if st, ok := ee.Sys().(syscall.WaitStatus); ok && st.Signaled() && st.Signal() == syscall.SIGKILL {
			r.signaled = true
		}
	default:
		w.t.Fatalf("%v: %v", args, err)
	}
	return r
}

// startRunInPreflight starts `run PLAN` in the background and returns once it is inside alpha's
// preflight hook (the world needs a waitFile to hold it there); the caller waits for it.
func (w *world) startRunInPreflight(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(w.bin, "run", w.plan)
	cmd.Env = append(os.Environ(), "FLUXVM_UPGRADE_TEST_FAKE_BPF="+w.fake)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(string(mustRead(w.order)), "alpha/preflight") {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatal("run never reached alpha's preflight hook")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd
}

func (w *world) txDir() string { return filepath.Join(w.state, "crash-tx") }

func (w *world) status() *upgrade.Status {
	w.t.Helper()
	r := w.run("", "status", "--json", w.plan)
	if r.code != 0 {
		w.t.Fatalf("status: exit %d: %s", r.code, r.stderr)
	}
	var st upgrade.Status
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
		w.t.Fatalf("status --json: %v\n%s", err, r.stdout)
	}
	return &st
}

func (w *world) hookOrder() []string {
	b, err := os.ReadFile(w.order)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		w.t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// checkConverged asserts the terminal state, the files, the maps, the hook order and the evidence.
func (w *world) checkConverged(wantState string) {
	t := w.t
	t.Helper()
	st := w.status()
	if st.State != wantState {
		t.Fatalf("state: got %s (%s), want %s", st.State, st.Reason, wantState)
	}
	if r := w.run("", "verify-evidence", w.txDir()); r.code != 0 {
		t.Errorf("verify-evidence: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	for _, c := range w.comps {
		conf, _ := os.ReadFile(filepath.Join(w.work, c+".conf"))
		_, createdErr := os.Stat(filepath.Join(w.work, c+".created"))
		var m struct{ Entries map[string]string }
		json.Unmarshal([]byte(w.fakeMap("dump", filepath.Join(w.bpf, c, "m"))), &m)
		switch wantState {
		case upgrade.StateCommitted:
			if string(conf) != "new config of "+c+"\n" || createdErr != nil {
				t.Errorf("%s: committed but config %q, created file err %v", c, conf, createdErr)
			}
			if fmt.Sprint(m.Entries) != "map[01:0a 02:0b 03:00]" {
				t.Errorf("%s: committed map entries %v, want old entries merged into the new map", c, m.Entries)
			}
		case upgrade.StateRolledBack:
			if string(conf) != "old config of "+c+"\n" || !errors.Is(createdErr, os.ErrNotExist) {
				t.Errorf("%s: rolled back but config %q, created file err %v", c, conf, createdErr)
			}
			// exactly the old entries: key 03, added by the apply, is gone
			if fmt.Sprint(m.Entries) != "map[01:0a 02:0b]" {
				t.Errorf("%s: rolled back map entries %v, want map[01:0a 02:0b]", c, m.Entries)
			}
			w.checkFile(c+".conf", "old config of "+c+"\n", 0o640)
			w.checkFile(c+".removed", "removed file of "+c+"\n", 0o604)
		}
		if wantState == upgrade.StateCommitted {
			if _, err := os.Lstat(filepath.Join(w.work, c+".removed")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: committed but the file the apply deleted is there (%v)", c, err)
			}
		}
	}
	w.checkOrder(st)
}

// checkFile asserts a work file's content, permission bits and owner (the test process's, as
// the world created it; the apply hook hands configs to uid 65534 when run as root).
func (w *world) checkFile(name, content string, mode os.FileMode) {
	t := w.t
	t.Helper()
	p := filepath.Join(w.work, name)
	fi, err := os.Lstat(p)
	if err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if b := mustRead(p); string(b) != content || fi.Mode() != mode || int(st.Uid) != os.Getuid() || int(st.Gid) != os.Getgid() {
		t.Errorf("%s: got %q mode %v owner %d:%d, want %q mode %v owner %d:%d", name, b, fi.Mode(), st.Uid, st.Gid, content, mode, os.Getuid(), os.Getgid())
	}
}

// checkOrder asserts that hooks ran in plan order, that apply ran at most once per component,
// that only idempotent hooks were repeated (and only back to back, by a resume) and that the
// rollback hooks ran in reverse order for exactly the components whose apply had started.
func (w *world) checkOrder(st *upgrade.Status) {
	t := w.t
	t.Helper()
	got := w.hookOrder()
	var dedup []string
	for i, h := range got {
		if i > 0 && got[i-1] == h {
			if strings.HasSuffix(h, "/apply") {
				t.Errorf("apply hook %s ran twice: %v", h, got)
			}
			continue
		}
		dedup = append(dedup, h)
	}
	var forward []string
	for _, c := range w.comps {
		forward = append(forward, c+"/preflight", c+"/apply", c+"/health")
	}
	i := 0
	for i < len(dedup) && i < len(forward) && dedup[i] == forward[i] {
		i++
	}
	var applied []string // components whose apply step started, per the journal
	for _, cs := range st.Components {
		for _, s := range cs.Steps {
			if s.Phase == "forward" && s.Step == upgrade.StepApply && s.Attempts > 0 {
				applied = append(applied, cs.Name)
			}
		}
	}
	var wantRollback []string
	if st.State != upgrade.StateCommitted {
		for k := len(applied) - 1; k >= 0; k-- {
			wantRollback = append(wantRollback, applied[k]+"/rollback", applied[k]+"/rollback-health")
		}
	}
	if fmt.Sprint(dedup[i:]) != fmt.Sprint(wantRollback) {
		t.Errorf("hook order: got %v\n  forward prefix %v, then %v; want rollback %v", got, dedup[:i], dedup[i:], wantRollback)
	}
}

// crashPoints lists every failpoint a clean run of the plan passes, from its journal.
func crashPoints(t *testing.T, failHealth string) []string {
	w := newWorld(t, failHealth)
	r := w.run("", "run", w.plan)
	if r.code != 0 && r.code != exitRolledBack {
		t.Fatalf("clean run: exit %d: %s", r.code, r.stderr)
	}
	evs, err := upgrade.ReadJournal(w.txDir())
	if err != nil {
		t.Fatal(err)
	}
	var pts []string
	for _, ev := range evs {
		pts = append(pts, ev.Key())
		if ev.Type == upgrade.EvStepStart {
			pts = append(pts, "ran:"+ev.Component+":"+ev.Step)
		}
	}
	return append(pts, "final:journal.final.json", "final:EVIDENCE.sha256")
}

// TestCrashAtEveryStep kills the real binary with SIGKILL right after every durable journal
// record (and after every step's action, before its outcome record, and between the final
// files) of a 3-component plan, once succeeding and once failing gamma's health check, then
// recovers with resume, rollback or reconcile and asserts convergence.
func TestCrashAtEveryStep(t *testing.T) {
	scenarios := []struct {
		name       string
		failHealth string
	}{{"succeeding", ""}, {"gamma-health-fails", "gamma"}}
	recoveries := []string{"resume", "rollback", "reconcile"}
	// Every crash point always runs. Every point × every recovery (3×) runs in CI
	// (SYSBOX_TEST_REQUIRE_ALL=1) or with FLUXVM_UPGRADE_CRASH_FULL=1, unless -short.
	full := (testenv.RequireAll() || os.Getenv("FLUXVM_UPGRADE_CRASH_FULL") == "1") && !testing.Short()
	// The crash runs are independent worlds (own directories, own fake map store), so they run in
	// parallel; the count is checked once every subtest has finished.
	var planned int
	var kills atomic.Int64
	t.Cleanup(func() {
		// Every enumerated crash point must have killed the binary once per recovery tried.
		if planned == 0 || kills.Load() != int64(planned) {
			t.Errorf("crash harness: %d kills for %d planned crash runs", kills.Load(), planned)
		}
	})
	for _, sc := range scenarios {
		points := crashPoints(t, sc.failHealth)
		t.Logf("%s plan: %d crash points", sc.name, len(points))
		for pi, pt := range points {
			for ri, rec := range recoveries {
				if !full && ri != pi%len(recoveries) {
					continue // one recovery per crash point, rotating through the three
				}
				planned++
				t.Run(sc.name+"/"+pt+"/"+rec, func(t *testing.T) {
					t.Parallel()
					w := newWorld(t, sc.failHealth)
					r := w.run(pt, "run", w.plan)
					if !r.signaled {
						t.Fatalf("run with failpoint %s: not killed (exit %d): %s", pt, r.code, r.stderr)
					}
					kills.Add(1)
					committedBeforeCrash := false
					if evs, err := upgrade.ReadJournal(w.txDir()); err != nil {
						t.Fatalf("journal after SIGKILL: %v", err)
					} else {
						for _, ev := range evs {
							if ev.Type == upgrade.EvEnd && ev.State == upgrade.StateCommitted {
								committedBeforeCrash = true
							}
						}
					}
					want := upgrade.StateRolledBack
					switch rec {
					case "resume":
						r = w.run("", "resume", w.plan)
						// Only an interrupted apply (started, outcome not journaled) turns a succeeding
						// plan into a rollback: resume does not re-run a non-idempotent step.
						interruptedApply := strings.HasSuffix(pt, ":apply") && (strings.HasPrefix(pt, "step-start:") || strings.HasPrefix(pt, "ran:"))
						if sc.failHealth == "" && !interruptedApply {
							want = upgrade.StateCommitted
						}
						if r.code != exitForState(want) {
							t.Errorf("resume: exit %d, want %d: %s%s", r.code, exitForState(want), r.stdout, r.stderr)
						}
					case "rollback":
						r = w.run("", "rollback", w.plan)
						if committedBeforeCrash {
							want = upgrade.StateCommitted
							if r.code != exitTxState {
								t.Errorf("rollback of committed: exit %d, want %d: %s", r.code, exitTxState, r.stderr)
							}
						} else if r.code != exitRolledBack {
							t.Errorf("rollback: exit %d, want %d: %s%s", r.code, exitRolledBack, r.stdout, r.stderr)
						}
					case "reconcile":
						r = w.run("", "reconcile", "--state-dir", w.state, "--stale-minutes", "0")
						if committedBeforeCrash {
							want = upgrade.StateCommitted
						}
						if r.code != 0 {
							t.Errorf("reconcile: exit %d: %s%s", r.code, r.stdout, r.stderr)
						}
					}
					w.checkConverged(want)
					// A second recovery is a no-op that reports the same terminal state: no hook
					// runs, and files, maps, journal and evidence are exactly as they were.
					hooksBefore := len(w.hookOrder())
					journalBefore := mustRead(filepath.Join(w.txDir(), upgrade.JournalFile))
					r2 := w.run("", "resume", w.plan)
					if r2.code != exitForState(want) {
						t.Errorf("second resume: exit %d, want %d: %s", r2.code, exitForState(want), r2.stderr)
					}
					if got := w.hookOrder(); len(got) != hooksBefore {
						t.Errorf("second resume ran hooks: %v", got[hooksBefore:])
					}
					if !bytes.Equal(mustRead(filepath.Join(w.txDir(), upgrade.JournalFile)), journalBefore) {
						t.Errorf("second resume changed the journal")
					}
					w.checkConverged(want)
				})
			}
		}
	}
}

// TestUnknownFailpointRefused: a misspelled failpoint must stop the test binary at once instead
// of running the transaction to the end without a crash.
func TestUnknownFailpointRefused(t *testing.T) {
	w := newWorld(t, "")
	for _, fp := range []string{"step-dne:alpha:apply", "step-done:alpha:aply", "final:EVIDENCE", "ended", "ran:alpha"} {
		r := w.run(fp, "run", w.plan)
		if r.signaled || r.code != exitUsage || !strings.Contains(r.stderr, "unknown failpoint") {
			t.Errorf("failpoint %q: exit %d signaled %v: %s", fp, r.code, r.signaled, r.stderr)
		}
	}
	if _, err := os.Stat(w.txDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a run with an unknown failpoint created the transaction: %v", err)
	}
}
