package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/fluxvm/upgrade"
	"zyvor.dev/sysbox/internal/testenv"
)

// fsHook acts like a component on a real pinned map: apply rewrites the config and re-creates
// the map with one new key (65536); rollback re-creates it empty; health fails for the
// component named in $3. Each step prints a line so that every hook log has content.
const fsHook = `#!/bin/sh
set -eu
pin=$1 conf=$2 failhealth=${3:-}
echo "hook $FLUXVM_COMPONENT/$FLUXVM_STEP on $pin"
case $FLUXVM_STEP in
apply)
	printf 'new config\n' > "$conf"
	rm -f "$pin"
	bpftool map create "$pin" type hash key 4 value 8 entries 1024 name fxu_fs
	bpftool map update pinned "$pin" key 0 0 1 0 value 1 0 0 0 0 0 0 0
	;;
rollback)
	rm -f "$pin"
	bpftool map create "$pin" type hash key 4 value 8 entries 1024 name fxu_fs
	;;
health)
	bpftool map lookup pinned "$pin" key 1 0 0 0 >/dev/null
	[ "$FLUXVM_COMPONENT" != "$failhealth" ]
	;;
esac
`

// fsEntries is how many entries each map is seeded with: enough for a snapshot of several pages,
// so that a full disk can cut one in the middle.
const fsEntries = 400

// fsWorld is a two-component transaction on real pinned maps under /sys/fs/bpf/fluxvm whose
// state directory (journal, plan copy, hook logs, snapshots, evidence) is a small tmpfs.
type fsWorld struct {
	t                     *testing.T
	bin, bpftool          string
	dir, state, plan, etc string
	comps                 []string
	pins                  map[string]string // component → absolute pin
	failHealth            string
}

// newFSWorld needs root, bpftool, bpffs and the destructive-e2e gate (F19), like
// TestRealBPFFSRoundTrip. It mounts a tmpfs of sizeKiB at the state directory (unmounted in
// t.Cleanup, also on failure) and seeds the maps and config files.
func newFSWorld(t *testing.T, sizeKiB int, failHealth string) *fsWorld {
	t.Helper()
	w := &fsWorld{t: t, bpftool: requireDestructiveBPFFS(t), bin: testBinary(t), comps: []string{"a", "b"},
		pins: map[string]string{}, failHealth: failHealth}
	if err := os.MkdirAll("/sys/fs/bpf/fluxvm", 0o755); err != nil {
		t.Fatal(err)
	}
	w.dir = t.TempDir()
	w.state = filepath.Join(w.dir, "state")
	w.etc = filepath.Join(w.dir, "etc")
	for _, d := range []string{w.state, w.etc} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	testenv.MountTmpfs(t, w.state, sizeKiB)
	hook := filepath.Join(w.dir, "hook.sh")
	if err := os.WriteFile(hook, []byte(fsHook), 0o755); err != nil {
		t.Fatal(err)
	}
	var comps []string
	for _, c := range w.comps {
		rel := fmt.Sprintf("fluxvm/fxu_fs_%d_%s", os.Getpid(), c)
		pin := "/sys/fs/bpf/" + rel
		w.pins[c] = pin
		t.Cleanup(func() { os.Remove(pin) })
		w.seed(pin)
		conf := filepath.Join(w.etc, c+".conf")
		if err := os.WriteFile(conf, []byte("old config\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		argv, _ := json.Marshal([]string{hook, pin, conf, failHealth})
		comps = append(comps, fmt.Sprintf(`{"name":%q,"hooks":{"preflight":%[2]s,"apply":%[2]s,"health":%[2]s,"rollback":%[2]s,"rollback_health":%[2]s},
			"files":[%q],"maps":[{"name":"m","pin":%q,"policy":"merge","type":"hash","key_size":4,"value_size":8}]}`, c, argv, conf, rel))
	}
	w.plan = filepath.Join(w.dir, "plan.json")
	plan := fmt.Sprintf(`{"transaction_id":"fs-tx","state_dir":%q,"components":[%s]}`, w.state, strings.Join(comps, ","))
	if err := os.WriteFile(w.plan, []byte(plan), 0o644); err != nil {
		t.Fatal(err)
	}
	return w
}

// seed creates the map with keys 1..fsEntries (value 10×key) in one bpftool batch.
func (w *fsWorld) seed(pin string) {
	t := w.t
	os.Remove(pin)
	var b strings.Builder
	fmt.Fprintf(&b, "map create %s type hash key 4 value 8 entries 1024 name fxu_fs\n", pin)
	for k := 1; k <= fsEntries; k++ {
		v := k * 10
		fmt.Fprintf(&b, "map update pinned %s key %d %d 0 0 value %d %d 0 0 0 0 0 0\n", pin, k&255, k>>8, v&255, v>>8)
	}
	batch := filepath.Join(w.dir, "seed.batch")
	if err := os.WriteFile(batch, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(t, w.bpftool, "batch", "file", batch)
}

// entries dumps a map as key → value.
func (w *fsWorld) entries(pin string) map[int]int { return bpfDump(w.t, w.bpftool, pin) }

func (w *fsWorld) txDir() string { return filepath.Join(w.state, "fs-tx") }

// cmd returns the binary's command line; failpoint "" runs without one.
func (w *fsWorld) cmd(failpoint string, args ...string) *exec.Cmd {
	c := exec.Command(w.bin, args...)
	c.Env = os.Environ()
	if failpoint != "" {
		c.Env = append(c.Env, "FLUXVM_UPGRADE_TEST_FAILPOINT="+failpoint, "FLUXVM_UPGRADE_TEST_FAILPOINT_ACTION=stop")
	}
	return c
}

func (w *fsWorld) run(args ...string) (int, string) {
	out, err := w.cmd("", args...).CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		w.t.Fatalf("%v: %v", args, err)
	}
	if ee != nil && ee.ExitCode() < 0 {
		w.t.Fatalf("%v: %v\n%s", args, err, out)
	}
	if ee != nil {
		return ee.ExitCode(), string(out)
	}
	return 0, string(out)
}

// checkFailed checks what a run cut off by the file system left: its error names a file in the
// state directory and the errno; the journal, if any, reads as valid (a torn tail or a
// half-written record would be refused here), and no half-written file is in the state tree
// under a name the engine reads (temporary files only carry the durable .tmp- prefix).
func (w *fsWorld) checkFailed(code int, out, errno, file string) {
	t := w.t
	t.Helper()
	if code == 0 || code == exitRolledBack {
		t.Fatalf("run ended %d although the file system failed:\n%s", code, out)
	}
	named := false
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, errno) && strings.Contains(l, w.state+"/"+file) {
			named = true
			t.Logf("exit %d: %s", code, strings.TrimSpace(l))
		}
	}
	if !named {
		t.Fatalf("exit %d: the error must name %s/%s… and %q:\n%s", code, w.state, file, errno, out)
	}
	if _, err := os.Stat(w.txDir()); err == nil {
		if _, err := upgrade.ReadJournal(w.txDir()); err != nil {
			t.Fatalf("journal after the failure: %v", err)
		}
	}
}

// converge runs resume (or run, when the transaction never began) and checks the terminal state
// against the maps, the config files and the evidence. A rolled-back transaction must have
// restored exactly the seeded entries; a committed one must hold them plus the apply's key.
func (w *fsWorld) converge() string {
	t := w.t
	t.Helper()
	code, out := w.run("resume", w.plan)
	if code == exitTxState && strings.Contains(out, upgrade.ErrNoTransaction.Error()) {
		code, out = w.run("run", w.plan)
	}
	if code != exitOK && code != exitRolledBack {
		t.Fatalf("recovery after the file system came back: exit %d\n%s", code, out)
	}
	want := upgrade.StateCommitted
	if code == exitRolledBack {
		want = upgrade.StateRolledBack
	}
	if w.failHealth != "" && want != upgrade.StateRolledBack {
		t.Fatalf("committed although %s's health fails", w.failHealth)
	}
	if code, out := w.run("verify-evidence", w.txDir()); code != 0 {
		t.Fatalf("verify-evidence: exit %d\n%s", code, out)
	}
	if code, out := w.run("status", w.plan); code != exitOK || !strings.Contains(strings.ToLower(out), want) {
		t.Fatalf("status: exit %d, want %s\n%s", code, want, out)
	}
	for _, c := range w.comps {
		got := w.entries(w.pins[c])
		conf, _ := os.ReadFile(filepath.Join(w.etc, c+".conf"))
		wantConf := "old config\n"
		n := fsEntries
		if want == upgrade.StateCommitted {
			wantConf = "new config\n"
			n++
			if got[65536] != 1 {
				t.Errorf("%s: committed but the apply's key is missing", c)
			}
		}
		if string(conf) != wantConf {
			t.Errorf("%s: %s but config %q", c, want, conf)
		}
		if len(got) != n {
			t.Errorf("%s: %s with %d entries, want %d", c, want, len(got), n)
		}
		for k := 1; k <= fsEntries; k++ {
			if got[k] != k*10 {
				t.Fatalf("%s: %s but key %d holds %d, want %d (%d entries)", c, want, k, got[k], k*10, len(got))
			}
		}
	}
	return want
}

// usedKiB is what a clean run of the plan leaves on the state tmpfs (to place the fill points).
func usedKiB(t *testing.T, failHealth string) int {
	w := newFSWorld(t, 4096, failHealth)
	if code, out := w.run("run", w.plan); code != exitOK && code != exitRolledBack {
		t.Fatalf("clean run: exit %d\n%s", code, out)
	}
	w.converge()
	var st unix.Statfs_t
	if err := unix.Statfs(w.state, &st); err != nil {
		t.Fatal(err)
	}
	return int((st.Blocks - st.Bfree) * uint64(st.Bsize) >> 10)
}

// TestFullStateDirMidRun runs the upgrade with its state directory (journal, hook logs, map and
// file snapshots, evidence) on a tmpfs that runs out of space at a different write each time:
// free space from nothing to just short of what a clean run needs, once committing and once
// rolling back (b's health fails). Each run that fails must name the file and ENOSPC and leave a
// journal that reads as valid; once the space is freed, resume (or run, if the transaction never
// began) must converge with maps, configs and evidence in agreement.
func TestFullStateDirMidRun(t *testing.T) {
	for _, failHealth := range []string{"", "b"} {
		name := "commit"
		if failHealth != "" {
			name = "rollback"
		}
		t.Run(name, func(t *testing.T) {
			used := usedKiB(t, failHealth)
			t.Logf("a clean run uses %d KiB of the state tmpfs", used)
			failed := 0
			const points = 5
			for i := 0; i < points; i++ {
				free := (used * i / points) &^ 3 // KiB, whole pages
				t.Run(fmt.Sprintf("%dKiB", free), func(t *testing.T) {
					const size = 1024
					w := newFSWorld(t, size, failHealth)
					filler := filepath.Join(w.state, "filler")
					if err := os.WriteFile(filler, make([]byte, (size-free)<<10), 0o600); err != nil {
						t.Fatal(err)
					}
					code, out := w.run("run", w.plan)
					if code == exitOK || code == exitRolledBack {
						t.Logf("run finished (exit %d) in %d KiB", code, free)
					} else {
						failed++
						w.checkFailed(code, out, "no space left on device", "")
					}
					if err := os.Remove(filler); err != nil {
						t.Fatal(err)
					}
					t.Logf("converged: %s", w.converge())
				})
			}
			if failed < points/2 {
				t.Fatalf("only %d of %d runs ran out of space: the fill points miss the run", failed, points)
			}
		})
	}
}

// TestReadOnlyStateDirMidRun stops the real binary at a journal record (test failpoint, SIGSTOP),
// makes its state directory read-only, lets it go on, and checks that the run fails naming the
// file and EROFS with a journal that still reads as valid; after the directory is writable
// again, resume (or run) converges. The points cover the forward steps, the rollback and the
// final files.
func TestReadOnlyStateDirMidRun(t *testing.T) {
	points := []struct{ failHealth, at, file string }{ // file: the write that must fail next
		{"", upgrade.EvBegin, "fs-tx/logs"},
		{"", "step-done:a:preflight", "fs-tx/snapshots"},
		{"", "step-done:a:snapshot", "fs-tx/logs/a.apply.1.log"},
		{"", "step-done:b:health", "fs-tx/.journal.final.json.tmp-"},
		{"", "final:journal.final.json", "fs-tx/.EVIDENCE.sha256.tmp-"},
		{"b", "step-failed:b:health", "fs-tx/logs/b.rollback.1.log"},
		{"b", "step-done:a:restore-maps", "fs-tx/logs/a.rollback-health.1.log"},
	}
	for _, p := range points {
		t.Run(p.at+"/"+map[string]string{"": "commit", "b": "rollback"}[p.failHealth], func(t *testing.T) {
			w := newFSWorld(t, 1024, p.failHealth)
			c := w.cmd(p.at, "run", w.plan)
			var out strings.Builder
			c.Stdout, c.Stderr = &out, &out
			if err := c.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			var waitErr error
			go func() { waitErr = c.Wait(); close(exited) }()
			t.Cleanup(func() {
				_ = c.Process.Kill()
				<-exited
			})
			if !testenv.WaitStopped(t, c.Process.Pid, exited) {
				t.Fatalf("run never reached failpoint %s: %v\n%s", p.at, waitErr, out.String())
			}
			how, writable := testenv.ReadOnly(t, w.state)
			t.Logf("at %s: %s", p.at, how)
			if err := c.Process.Signal(unix.SIGCONT); err != nil {
				t.Fatal(err)
			}
			<-exited
			code := c.ProcessState.ExitCode()
			w.checkFailed(code, out.String(), "read-only file system", p.file)
			writable()
			t.Logf("converged: %s", w.converge())
		})
	}
}
