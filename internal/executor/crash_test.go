package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver/fake"
	"zyvor.dev/sysbox/internal/executor/exectest"
	"zyvor.dev/sysbox/internal/executor/failpoint"
)

// The crash tests run the executor in a separate process (this test binary re-executed in
// helper mode), kill it with SIGKILL at a failpoint — after every checkpoint record, after
// every state save, and after every driver mutation (between a provider call and the
// checkpoint that records it) — then run recovery in a fresh process and check that state
// and the (file-persisted) fake world agree, that nothing leaked or was duplicated, that a
// second recovery changes nothing, and that re-running the command converges.

const envCrashHelper = "SYSBOX_EXEC_CRASH_HELPER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(envCrashHelper); dir != "" {
		os.Exit(crashHelper(dir, os.Args[len(os.Args)-1]))
	}
	os.Exit(m.Run())
}

// crashDesired is the topology every crash scenario works on.
func crashDesired() []Action { return topology(2, 3, true) }

// crashHelper runs one command against the world, state and checkpoint in dir.
func crashHelper(dir, cmd string) int {
	d, err := fake.New(fake.Options{Path: filepath.Join(dir, "world.json")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	t := &testing.T{}
	h := newHarnessWith(t, dir, d)
	if p, err := strconv.Atoi(os.Getenv("SYSBOX_CRASH_PARALLELISM")); err == nil {
		h.ex.Parallelism = p
	}
	fp, err := failpoint.FromEnv(os.LookupEnv, FailPoints)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	if fp != nil {
		h.ex.AfterDurable = fp.Hit
		if path := os.Getenv(envPowerLoss); path != "" {
			powerLossTrace(h.ex, fp, path)
		}
	}
	ctx := context.Background()
	st, err := h.store.Read(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	desired := crashDesired()
	switch cmd {
	case "apply":
		_, err = h.ex.Apply(ctx, &Request{Fingerprint: "fp-crash", Actions: planFor(st, desired)})
	case "replace":
		_, err = h.ex.Apply(ctx, &Request{Fingerprint: "fp-crash-replace", Actions: planFor(st, desired, "sysbox_node.web[1]", "sysbox_firewall.web0")})
	case "destroy":
		_, _, err = h.ex.Destroy(ctx, nil)
	case "reset":
		_, err = h.ex.Reset(ctx, ResetRequest{Targets: []addrs.Instance{mustAddr("sysbox_node.web[0]")}, Desired: desired, Fingerprint: "fp-crash-reset"})
	case "recover":
		var rep *RecoverReport
		rep, err = h.ex.Recover(ctx)
		if err == nil && rep.Nothing {
			fmt.Println("nothing to recover")
		}
	default:
		err = fmt.Errorf("unknown helper command %q", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func runHelper(t *testing.T, dir, cmd string, env ...string) exectest.Outcome {
	t.Helper()
	c := exec.Command(os.Args[0], "-test.run=^$", cmd)
	c.Env = append(os.Environ(), envCrashHelper+"="+dir)
	c.Env = append(c.Env, env...)
	return exectest.Run(t, "helper "+cmd, c)
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

type crashScenario struct {
	name  string
	setup func(t *testing.T, dir string) // prepares world+state in dir before the crashing command
	cmd   string
	// converge re-runs what the user would run after recovery and checks the final result.
	converge func(t *testing.T, dir string)
}

// setupApply applies the crash topology (the setup of a scenario that needs it in place).
func setupApply(t *testing.T, dir string) {
	if r := runHelper(t, dir, "apply"); r.Killed || r.Code != 0 {
		t.Fatalf("setup apply: %+v", r)
	}
}

// convergeCrashApply runs the apply a user runs after recovery and checks that state holds the
// whole topology and agrees with the fake drivers.
func convergeCrashApply(t *testing.T, dir string) {
	if r := runHelper(t, dir, "apply"); r.Killed || r.Code != 0 {
		t.Fatalf("converging apply: %+v", r)
	}
	h := openDir(t, dir)
	st := h.state()
	if got, want := len(st.Resources), len(crashDesired()); got != want {
		t.Fatalf("after converging apply: %d resources %v, want %d", got, st.Addresses(), want)
	}
	checkAgree(t, st, h.fake)
}

// convergeCrashDestroy runs the destroy a user runs after recovery and checks that neither
// state nor the fake drivers hold anything.
func convergeCrashDestroy(t *testing.T, dir string) {
	if r := runHelper(t, dir, "destroy"); r.Killed || r.Code != 0 {
		t.Fatalf("converging destroy: %+v", r)
	}
	h := openDir(t, dir)
	if st := h.state(); len(st.Resources) != 0 {
		t.Fatalf("after destroy: %v", st.Addresses())
	}
	w := h.fake.World()
	if len(w.Nodes)+len(w.Networks)+len(w.NICs)+len(w.Policies) != 0 {
		t.Fatalf("world after destroy: %+v", w)
	}
}

func TestCrashAtEveryStep(t *testing.T) {
	applied, convergeApply := setupApply, convergeCrashApply
	scenarios := []crashScenario{
		{name: "create", setup: func(*testing.T, string) {}, cmd: "apply", converge: convergeApply},
		{name: "replace", setup: applied, cmd: "replace", converge: convergeApply},
		{name: "delete", setup: applied, cmd: "destroy", converge: convergeCrashDestroy},
		{name: "reset", setup: applied, cmd: "reset", converge: func(t *testing.T, dir string) {
			h := openDir(t, dir)
			n := h.state().Resource(mustAddr("sysbox_node.web[0]"))
			if g := n.Owner.Generation; g != 1 && g != 2 {
				t.Fatalf("web[0] generation %d after reset recovery", g)
			}
			convergeApply(t, dir)
		}},
	}
	for _, sc := range scenarios {
		for _, point := range []string{PointCheckpoint, PointState, "mutation"} {
			t.Run(sc.name+"/"+point, func(t *testing.T) {
				base := t.TempDir()
				sc.setup(t, base)
				killAtEach(t, base, sc.cmd, point, func(t *testing.T, dir, what string) {
					checkRecovered(t, dir, what)
					sc.converge(t, dir)
				})
			})
		}
	}
}

// killAtEach runs cmd on fresh copies of base killed at each point of its class (a FailPoints
// name, or "mutation": the fake driver's persisted mutations) and calls after with every
// killed directory. Each run counts the points it passed from the failpoint trace or the fake
// world's mutation counter (see exectest.KillLoop).
func killAtEach(t *testing.T, base, cmd, point string, after func(t *testing.T, dir, what string), env ...string) {
	t.Helper()
	exectest.KillLoop{Point: point, Exact: point != PointState, After: after,
		Run: func(t *testing.T, n int) (exectest.Outcome, int, string) {
			dir := t.TempDir()
			copyDir(t, base, dir)
			before := openDir(t, dir).fake.World().Mutations
			trace := filepath.Join(t.TempDir(), "trace")
			runEnv := append(env[:len(env):len(env)], failpoint.EnvTrace+"="+trace)
			if point == "mutation" {
				runEnv = append(runEnv, fake.EnvFailpoints+"=mutation@"+strconv.Itoa(n)+"=crash")
			} else {
				runEnv = append(runEnv, failpoint.EnvSpec+"="+point+"@"+strconv.Itoa(n))
			}
			r := runHelper(t, dir, cmd, runEnv...)
			if point == "mutation" {
				passed := int(openDir(t, dir).fake.World().Mutations - before)
				if r.Killed {
					passed-- // the nth mutation is persisted before its failpoint fires
				}
				return r, passed, dir
			}
			return r, exectest.Traced(t, trace, point), dir
		}}.Kill(t, cmd)
}

// TestCrashParallel kills a parallel apply (records group-committed) at every checkpoint.
func TestCrashParallel(t *testing.T) {
	killAtEach(t, t.TempDir(), "apply", PointCheckpoint, checkRecovered, "SYSBOX_CRASH_PARALLELISM=8")
}

func openDir(t *testing.T, dir string) *harness {
	t.Helper()
	d, err := fake.New(fake.Options{Path: filepath.Join(dir, "world.json")})
	if err != nil {
		t.Fatal(err)
	}
	return newHarnessWith(t, dir, d)
}

// checkRecovered runs recovery twice in fresh processes and checks agreement and idempotence.
func checkRecovered(t *testing.T, dir, what string) {
	t.Helper()
	r := runHelper(t, dir, "recover")
	if r.Killed || r.Code != 0 {
		t.Fatalf("%s: recover: %+v", what, r)
	}
	h := openDir(t, dir)
	st := h.state()
	if st == nil {
		// Killed before the first state save: nothing may exist.
		if w := h.fake.World(); len(w.Nodes)+len(w.Networks) != 0 {
			t.Fatalf("%s: world has objects but no state exists", what)
		}
		return
	}
	checkAgree(t, st, h.fake)
	if t.Failed() {
		t.Fatalf("%s: state and world disagree after recovery", what)
	}
	serial, muts := st.Serial, h.fake.World().Mutations
	r = runHelper(t, dir, "recover")
	if r.Killed || r.Code != 0 || !strings.Contains(r.Out, "nothing to recover") {
		t.Fatalf("%s: second recover: %+v", what, r)
	}
	h = openDir(t, dir)
	if st2 := h.state(); st2.Serial != serial || h.fake.World().Mutations != muts {
		t.Fatalf("%s: second recover changed something (serial %d → %d, mutations %d → %d)", what, serial, st2.Serial, muts, h.fake.World().Mutations)
	}
	if _, err := os.Stat(filepath.Join(dir, CheckpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s: checkpoint left after recovery", what)
	}
}

// TestCrashDuringRecovery kills an apply, then kills the recovery itself at each of its
// checkpoint records, then recovers for real: recovery of a recovery converges too.
func TestCrashDuringRecovery(t *testing.T) {
	for _, n := range []int{8, 14, 20} { // inside node creation (created, attached, wired …)
		base := t.TempDir()
		r := runHelper(t, base, "apply", failpoint.EnvSpec+"="+PointCheckpoint+"@"+strconv.Itoa(n))
		if !r.Killed {
			t.Fatalf("apply not killed at checkpoint@%d: %+v", n, r)
		}
		t.Run(fmt.Sprintf("apply-killed-at-%d", n), func(t *testing.T) {
			killAtEach(t, base, "recover", PointCheckpoint, checkRecovered)
		})
	}
}
