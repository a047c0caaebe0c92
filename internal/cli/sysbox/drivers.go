package sysbox

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/drivers/docker"
	"zyvor.dev/sysbox/drivers/firecracker"
	"zyvor.dev/sysbox/drivers/libvirt"
	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/drivers/nftables"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/backend/backends"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/secrets"
)

// EnvTestFakeWorld switches the driver registry to test mode: the in-memory fake driver
// (internal/driver/fake), persisted to the named file, registered under the built-in driver
// names (netns, nftables, docker, libvirt). Crash tests use it to kill the real binary at every step
// without touching the host. Only test builds honour it (build tag sysboxtest, or this
// package's own tests); a normal build refuses to run with it set rather than silently use
// the real drivers.
const EnvTestFakeWorld = "SYSBOX_TEST_FAKE_WORLD"

// testRegistry builds test mode's registry (the fake world at the given path standing in under
// each of the given driver names). Only test builds set it (fakeworld_sysboxtest.go, the
// package's tests), so that a normal build neither links the fake nor honours EnvTestFakeWorld.
var testRegistry func(world string, names []string) (*driver.Registry, error)

// builtinDrivers register the drivers sysbox ships with; the registry they fill is the one
// list of driver names (in test mode the fake stands in under each of them).
var builtinDrivers = []func(*driver.Registry) error{netns.Register, nftables.Register, docker.Register, libvirt.Register, firecracker.Register}

// DriverRegistry builds the registry of this process: the built-in drivers, or in test mode
// (EnvTestFakeWorld set in the environment lookup) the fake under their names. This is the one
// place that knows the concrete drivers; cmd/sysbox hands it to Env.Drivers.
func DriverRegistry(lookup func(string) (string, bool)) (*driver.Registry, error) {
	r := driver.NewRegistry()
	for _, reg := range builtinDrivers {
		if err := reg(r); err != nil {
			return nil, err
		}
	}
	if lookup != nil {
		if world, ok := lookup(EnvTestFakeWorld); ok && world != "" {
			if testRegistry == nil {
				return nil, fmt.Errorf("%s is set, but this sysbox is not a test build (build tag sysboxtest): refusing to run rather than use the real drivers; unset it", EnvTestFakeWorld)
			}
			return testRegistry(world, r.Names())
		}
	}
	return r, nil
}

// nodeDrivers lists the drivers of r that run nodes: the names a sysbox_node may choose.
func nodeDrivers(r *driver.Registry) []string {
	var out []string
	for _, n := range r.Names() {
		if r.Has(n, driver.CapNodeLifecycle) {
			out = append(out, n)
		}
	}
	return out
}

// registry returns the registry the executing commands use: Env.Drivers when it yields a
// *driver.Registry (cmd/sysbox, tests), else DriverRegistry. Test mode always wins, so that
// planning and applying see the same drivers.
func (a *App) registry() (*driver.Registry, error) {
	if v, ok := a.Env.LookupEnv(EnvTestFakeWorld); ok && v != "" {
		return DriverRegistry(a.Env.LookupEnv)
	}
	if a.Env.Drivers != nil {
		c, err := a.Env.Drivers()
		if err != nil {
			return nil, fmt.Errorf("drivers: %w", err)
		}
		if r, ok := c.(*driver.Registry); ok {
			return r, nil
		}
	}
	return DriverRegistry(a.Env.LookupEnv)
}

// runFlags are shared by the commands that change the topology.
type runFlags struct {
	vars        varFlags
	parallelism int
	lockTimeout time.Duration
	allowUnsafe bool
}

func addRunFlags(cmd *cobra.Command, f *runFlags) {
	addVarFlags(cmd, &f.vars)
	cmd.Flags().IntVar(&f.parallelism, "parallelism", 0, fmt.Sprintf("run at most `N` operations at once (default: the substrate's parallelism, else %d, beside which a driver that says it tolerates more runs that many of its own)", config.DefaultParallelism))
	cmd.Flags().DurationVar(&f.lockTimeout, "lock-timeout", 0, "wait up to `DURATION` for a held state lock (0: fail at once)")
	cmd.Flags().BoolVar(&f.allowUnsafe, "allow-unsafe-state", false, "change state through a backend without locking or compare-and-swap (only if nothing else writes it)")
}

// runtime is what an executing command works with.
type runtime struct {
	app     *App
	l       *loaded
	reg     *driver.Registry
	mgr     *backend.Manager
	ex      *executor.Executor
	facts   plans.Facts
	planner *plans.Planner
	close   func()
	prog    *progress
	run     *runLog // the last run's file of a state-changing run (see beginRun)
}

// beginRun starts the last run's file for `sysbox ui`: from now on the progress lines and
// checkpoint records also go there. endRun writes the outcome; call both once per run.
func (rt *runtime) beginRun(command string) {
	a := rt.app
	rt.run = startRunLog(a.checkpointDir(), command, a.Env.Stderr, time.Now())
	rt.prog.run = rt.run
	rt.ex.Checkpointed = func(r executor.Record) {
		rt.run.checkpoint(r)
		if a.Env.Checkpoints != nil {
			a.Env.Checkpoints(r)
		}
	}
}

// endRun records the run's outcome in the last run's file; err is redacted first.
func (rt *runtime) endRun(err error) {
	msg := ""
	if err != nil {
		msg = rt.prog.redactor.Redact(err.Error())
	}
	rt.run.end(msg)
}

// openRuntime evaluates the topology, opens its state backend and builds the executor. The
// secret resolver is execution-scoped: it reads the environment only when a provider call
// needs a value.
func (a *App) openRuntime(ctx context.Context, f *runFlags, needFacts bool) (*runtime, error) {
	// First, before anything is read or touched: a normal build refuses crash-test failpoints.
	afterDurable, err := a.executorFailpoints()
	if err != nil {
		return nil, err
	}
	l, err := a.loadTopology(&f.vars)
	if err != nil {
		return nil, err
	}
	if l.diags.HasErrors() || l.top == nil {
		a.printDiags(a.Env.Stderr, l)
		return nil, &silentExit{code: ExitError}
	}
	a.printDiags(a.Env.Stderr, l)
	reg := l.drivers
	be, err := a.openConfiguredBackend(ctx, l.top.Substrate.Backend)
	if err != nil {
		return nil, err
	}
	mgr := backend.NewManager(be, backend.Options{AllowUnsafe: f.allowUnsafe, LockTimeout: f.lockTimeout})
	rt := &runtime{app: a, l: l, reg: reg, mgr: mgr, close: func() { be.Close() },
		planner: &plans.Planner{Handlers: l.reg, Capabilities: reg, ToolVersion: a.Env.Version}}
	if needFacts {
		if rt.facts, err = artifactFacts(l.top); err != nil {
			be.Close()
			return nil, err
		}
	}
	// A parallelism the user chose (flag or setting) bounds all operations together; the
	// default lets a driver that tolerates more operations in flight run more of its own.
	par, fixed := f.parallelism, f.parallelism > 0 || l.top.Substrate.ParallelismSet
	if par <= 0 {
		par = l.top.Substrate.Parallelism
	}
	redactor := &secrets.Redactor{}
	res := &secrets.EnvResolver{Lookup: a.Env.LookupEnv, Redactor: redactor}
	rt.prog = newProgress(a, redactor)
	rt.ex = &executor.Executor{
		Registry:         reg,
		State:            mgr.Store(),
		Dir:              a.checkpointDir(),
		Parallelism:      par,
		FixedParallelism: fixed,
		Resolve: func(ctx context.Context, s string) (string, error) {
			return secrets.ResolveString(ctx, res, s)
		},
		Progress:     rt.prog.event,
		AfterDurable: afterDurable,
		Checkpointed: a.Env.Checkpoints,
		Resources:    l.reg,
	}
	return rt, nil
}

// checkpointDir holds the executor's checkpoint log of the run in progress.
func (a *App) checkpointDir() string { return filepath.Join(a.dir(), ".sysbox") }

// backendsOpen is a seam for tests.
var backendsOpen = openBackend

// openConfiguredBackend opens the state backend a topology's substrate block configures, its
// settings resolved (secret references included) from the environment.
func (a *App) openConfiguredBackend(ctx context.Context, b *config.NamedAttrs) (backend.Backend, error) {
	settings, err := a.backendSettings(ctx, b)
	if err != nil {
		return nil, err
	}
	be, err := backendsOpen(ctx, b.Name, settings)
	if err != nil {
		return nil, fmt.Errorf("state backend %s: %w", b.Name, err)
	}
	return be, nil
}

// desired plans the configuration against st (read-only use: reset, refresh, import) and
// returns executor actions carrying every configured resource's desired spec.
func (rt *runtime) desired(ctx context.Context) ([]executor.Action, *plans.Plan, error) {
	st, err := rt.mgr.Read(ctx)
	if err != nil {
		return nil, nil, err
	}
	p, err := rt.planner.Plan(plans.Request{Topology: rt.l.top, Prior: plans.FromState(st), Facts: rt.facts})
	if err != nil {
		return nil, nil, err
	}
	acts, err := executor.FromPlan(p, st, rt.l.reg)
	return acts, p, err
}

// progress prints one line per operation start and end; colour only on a TTY.
type progress struct {
	app      *App
	redactor *secrets.Redactor
	run      *runLog // also gets each line, uncoloured; nil: none
}

func newProgress(a *App, r *secrets.Redactor) *progress { return &progress{app: a, redactor: r} }

var opVerb = map[plans.Action][2]string{
	plans.Create:  {"Creating...", "Creation complete"},
	plans.Read:    {"Reading...", "Read complete"},
	plans.Update:  {"Modifying...", "Modifications complete"},
	plans.Replace: {"Replacing...", "Replacement complete"},
	plans.Delete:  {"Destroying...", "Destruction complete"},
	plans.Reset:   {"Resetting...", "Reset complete"},
}

func (p *progress) event(ev executor.Event) {
	if p.app.Env.Events != nil {
		p.app.Env.Events(ev)
	}
	v, ok := opVerb[ev.Op]
	if !ok {
		v = [2]string{string(ev.Op) + "...", string(ev.Op) + " complete"}
	}
	render := func(coloured bool) string {
		color := func(c, s string) string {
			if !coloured {
				return s
			}
			return c + s + ansiReset
		}
		switch ev.Phase {
		case "start":
			return fmt.Sprintf("%s: %s", color(ansiBold, ev.Addr), v[0])
		case "done":
			return fmt.Sprintf("%s: %s after %s", color(ansiBold, ev.Addr), color(ansiGreen, v[1]), ev.Elapsed.Round(time.Millisecond))
		case "failed":
			return fmt.Sprintf("%s: %s", color(ansiBold, ev.Addr), color(ansiRed, "failed: "+p.redactor.Redact(fmt.Sprint(ev.Err))))
		}
		return ""
	}
	line := render(p.app.color())
	if line == "" {
		return
	}
	fmt.Fprintln(p.app.Env.Stdout, line)
	p.run.progress(render(false))
}

// summary renders a run's result line.
func runSummary(verb string, res *executor.Result) string {
	if res == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d operation(s) done, %d unchanged, %d failed", verb, res.Done, res.Noop, len(res.Failed))
	if res.Checkpoint.Records > 0 {
		fmt.Fprintf(&b, " (%d checkpoint records in %d fsyncs, %d state saves)", res.Checkpoint.Records, res.Checkpoint.Syncs, res.StateSaves)
	}
	return b.String()
}

// renderRecovered reports what an automatic recovery did before the command.
func (a *App) renderRecovered(rep *executor.RecoverReport) {
	if rep == nil || rep.Nothing {
		return
	}
	fmt.Fprintf(a.Env.Stdout, "Recovered the interrupted %s run %s first:\n", rep.Command, rep.Run)
	for _, o := range rep.Ops {
		fmt.Fprintf(a.Env.Stdout, "  %s %s (from %s): %s\n", o.Op, o.Addr, o.From, o.Outcome)
	}
}

func openBackend(ctx context.Context, kind string, settings map[string]string) (backend.Backend, error) {
	return backends.Open(ctx, kind, settings)
}
