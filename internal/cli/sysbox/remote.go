package sysbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"zyvor.dev/sysbox/internal/agent"
	"zyvor.dev/sysbox/internal/backend"
	"zyvor.dev/sysbox/internal/controlplane/client"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/plans"
)

// EnvToken is the bearer token of the --remote commands (a project token).
const EnvToken = "SYSBOX_TOKEN"

// remoteFlags make a command run on a control plane's agent instead of on this host.
type remoteFlags struct {
	url, workspace string
}

func addRemoteFlags(cmd *cobra.Command, rf *remoteFlags) {
	cmd.Flags().StringVar(&rf.url, "remote", "", "run on the control plane at `URL` (token from "+EnvToken+"): an agent runs the command in the workspace, its output streams here")
	cmd.Flags().StringVar(&rf.workspace, "workspace", "default", "the control plane's workspace `NAME` (with --remote; created if absent)")
}

// remoteFlagsAllowed are the flags a remote command may carry, per op; the agent checks them
// again before it runs anything (it is the trust boundary). Flags that name files on the
// agent's host or carry values into the database (-var may be a secret) are not among them.
var remoteFlagsAllowed = map[string][]string{
	"plan":       {"destroy", "detailed-exitcode", "json", "target", "out"},
	"apply":      {"auto-approve", "target", "parallelism", "lock-timeout"},
	"destroy":    {"auto-approve", "json", "parallelism", "lock-timeout"},
	"reset":      {"parallelism", "lock-timeout"},
	"refresh":    {"json", "parallelism", "lock-timeout"},
	"state list": {"json"},
	"state show": {"json"},
	"output":     {"json"},
}

// checkRemoteArgs checks a remote command's arguments: "--name=value" flags the op allows,
// then "--" and the positional arguments. It returns the flags and the positional ones.
func checkRemoteArgs(op string, args []string) (flags, positional []string, err error) {
	allowed, ok := remoteFlagsAllowed[op]
	if !ok {
		return nil, nil, fmt.Errorf("remote op %q: not one of the remote commands", op)
	}
	for i, a := range args {
		if a == "--" {
			return flags, args[i+1:], nil
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || !strings.Contains(a, "=") || !slices.Contains(allowed, name) {
			return nil, nil, fmt.Errorf("remote %s: argument %q is not allowed (flags: --NAME=VALUE of %s)", op, a, strings.Join(allowed, ", "))
		}
		flags = append(flags, a)
	}
	return flags, nil, nil
}

// remoteArgs renders the flags set on cmd (as --name=value) and the positional args, for
// checkRemoteArgs.
func remoteArgs(cmd *cobra.Command, positional []string) []string {
	var out []string
	cmd.Flags().Visit(func(f *pflag.Flag) {
		switch f.Name {
		case "remote", "workspace", "chdir", "no-color":
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				out = append(out, "--"+f.Name+"="+v)
			}
			return
		}
		out = append(out, "--"+f.Name+"="+f.Value.String())
	})
	return append(append(out, "--"), positional...)
}

// runRemote runs op on the control plane: it stores the topology directory as a revision,
// queues the command as a run of the workspace, and streams the run's events (the agent's
// stdout and stderr lines) until it ends; the exit code is the command's on the agent. With
// planFile (apply PLANFILE), the stored plan is uploaded and applied instead.
func (a *App) runRemote(cmd *cobra.Command, rf *remoteFlags, op string, positional []string, planFile string) error {
	ctx := cmd.Context()
	args := remoteArgs(cmd, positional)
	flags, _, err := checkRemoteArgs(op, args)
	if err != nil {
		return err
	}
	if (op == "apply" || op == "destroy") && planFile == "" && !slices.Contains(flags, "--auto-approve=true") {
		return fmt.Errorf("%s --remote: pass -auto-approve (or, for apply, a plan file): the agent cannot ask for approval", op)
	}
	token, _ := a.Env.LookupEnv(EnvToken)
	if token == "" {
		return fmt.Errorf("--remote %s: set %s to a project token", rf.url, EnvToken)
	}
	u := &client.User{URL: rf.url, Token: token}
	project, err := u.Project(ctx)
	if err != nil {
		return err
	}
	ws, err := u.Workspace(ctx, project, rf.workspace)
	if err != nil {
		return err
	}
	bundle, err := agent.PackDir(a.dir())
	if err != nil {
		return err
	}
	rev, err := u.PutRevision(ctx, project, bundle)
	if err != nil {
		return err
	}
	// Runs are sticky: the workspace's state stays with the agent that applies it first.
	req := client.RunRequest{Op: op, Args: args, Sticky: true}
	if planFile != "" {
		data, err := os.ReadFile(planFile)
		if err != nil {
			return err
		}
		if _, err := plans.Decode(data); err != nil {
			return fmt.Errorf("%s: %w", planFile, err)
		}
		if req.Plan, err = u.PutPlan(ctx, project, ws, rev, data); err != nil {
			return err
		}
	} else {
		req.Workspace, req.Revision, req.Requires = ws, rev, a.remoteRequires()
	}
	run, err := u.QueueRun(ctx, project, req)
	if err != nil {
		return err
	}
	run, err = u.Follow(ctx, project, run.ID, func(e client.RunEvent) {
		switch e.Kind {
		case "progress":
			fmt.Fprintln(a.Env.Stdout, e.Data)
		case "stderr":
			fmt.Fprintln(a.Env.Stderr, e.Data)
		}
	})
	if err != nil {
		return err
	}
	if !strings.HasPrefix(run.Result, commandExited(op, run.ExitCode)) {
		return fmt.Errorf("remote run %s on agent %s: %s", run.ID, run.Agent, run.Result)
	}
	if out := flagValue(flags, "out"); op == "plan" && out != "" && run.OutputPlan != "" {
		data, err := u.PlanFile(ctx, project, run.OutputPlan)
		if err != nil {
			return err
		}
		if err := durable.WriteFile(out, data, 0o600); err != nil {
			return fmt.Errorf("plan %s: %w", out, err)
		}
	}
	if run.ExitCode != ExitOK {
		return &silentExit{code: run.ExitCode} // the command's own error came as its stderr
	}
	return nil
}

// commandExited is the result an agent reports for a command that ran to its exit code.
func commandExited(op string, code int) string { return fmt.Sprintf("sysbox %s exited %d", op, code) }

func flagValue(flags []string, name string) string {
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

// remoteRequires are the capabilities a command run needs: the drivers the topology's
// substrate block declares (an agent without them could not plan or apply it). A topology that
// does not decode here requires nothing more: the agent reports its errors.
func (a *App) remoteRequires() []string {
	l, err := a.loadTopology(&varFlags{})
	if err != nil || l.top == nil {
		return nil
	}
	var out []string
	for _, d := range l.top.Substrate.Drivers {
		out = append(out, "driver:"+d.Name)
	}
	return out
}

// agentCommand runs a command run (one without a stored plan) in the workspace dir exactly as
// `sysbox OP ARGS --chdir DIR` would: the args are checked against remoteFlagsAllowed first;
// a plan run writes its plan file to the run's own path and stores it on the control plane.
func (a *App) agentCommand(ctx context.Context, dir string, j agent.Job) (agent.Outcome, error) {
	run := j.Lease.Run
	flags, positional, err := checkRemoteArgs(run.Op, run.Args)
	if err != nil {
		return agent.Outcome{}, fmt.Errorf("run %s: %w", run.ID, err)
	}
	if err := a.unpackRun(dir, j); err != nil {
		return agent.Outcome{}, err
	}
	stdout := j.Progress
	planPath := ""
	if run.Op == "plan" {
		planPath = filepath.Join(dir, ".sysbox-run-"+run.ID+".plan")
		defer os.Remove(planPath)
		shown := ""
		kept := flags[:0:0]
		for _, f := range flags {
			if v, ok := strings.CutPrefix(f, "--out="); ok {
				shown = v
				continue
			}
			kept = append(kept, f)
		}
		flags = append(kept, "--out="+planPath)
		if shown != "" {
			// The plan's "Saved the plan to FILE" names the file the user asked for.
			stdout = &replacer{w: j.Progress, old: []byte(planPath), new: []byte(shown)}
		}
	}
	env := *a.Env
	env.Stdout, env.Stderr, env.Stdin, env.IsTTY = stdout, j.Errors, nil, false
	env.Checkpoints = checkpointEvents(j)
	var closeProjections func()
	env.Events, closeProjections = a.projectOnEvents(ctx, dir, j)
	defer closeProjections()
	argv := append(strings.Fields(run.Op), flags...)
	argv = append(append(argv, "--no-color", "--chdir", dir, "--"), positional...)
	code := Main(ctx, &env, argv)
	if planPath != "" && (code == ExitOK || code == ExitChanges) {
		data, err := os.ReadFile(planPath)
		if err != nil {
			return agent.Outcome{}, fmt.Errorf("run %s: %w", run.ID, err)
		}
		if err := j.PlanOutput(data); err != nil {
			return agent.Outcome{}, fmt.Errorf("run %s: store the plan: %w", run.ID, err)
		}
	}
	out := agent.Outcome{Result: commandExited(run.Op, code), ExitCode: code, Projections: a.projections(ctx, dir)}
	if code != ExitOK && !(run.Op == "plan" && code == ExitChanges) {
		return out, errors.New(out.Result)
	}
	return out, nil
}

// unpackRun writes the run's revision into the workspace directory.
func (a *App) unpackRun(dir string, j agent.Job) error {
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := agent.Unpack(j.Bundle, dir); err != nil {
		return fmt.Errorf("run %s: %w", j.Lease.Run.ID, err)
	}
	return nil
}

// projectOnEvents returns the executor-event hook that has the projections that changed sent
// when a resource operation ends (its state is durable by then): the control plane sees the
// lab converge during the run, not only at its end. The hook only signals: a goroutine reads
// the state and queues what changed (the agent sends it in the background), at once for the
// first ending operation, later at most every projectEvery (the run's end sends all), so the
// executor never waits for it. done sends what is due and stops it.
func (a *App) projectOnEvents(ctx context.Context, dir string, j agent.Job) (hook func(executor.Event), done func()) {
	kick := make(chan struct{}, 1)
	stop := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		var m *backend.Manager
		defer func() {
			if m != nil {
				m.Backend().Close()
			}
		}()
		sent := map[string]client.Projection{}
		send := func() {
			if m == nil {
				env := *a.Env
				env.Stdout, env.Stderr, env.Stdin = io.Discard, io.Discard, nil
				var err error
				if m, err = (&App{Env: &env, ChDir: dir}).stateManager(ctx, &stateFlags{}); err != nil {
					m = nil
					return
				}
			}
			st, err := m.Read(ctx)
			if err != nil {
				return
			}
			var changed []client.Projection
			for _, p := range projectionsOf(st) {
				if sent[p.Address] != p {
					changed = append(changed, p)
					sent[p.Address] = p
				}
			}
			if len(changed) > 0 {
				j.Project(changed...) // a fenced refusal cancels the run; others wait for the end
			}
		}
		// stopped sends what an operation that ended since the last send changed.
		stopped := func() {
			select {
			case <-kick:
				send()
			default:
			}
		}
		for {
			select {
			case <-kick:
				send()
			case <-stop:
				stopped()
				return
			}
			select {
			case <-stop:
				stopped()
				return
			case <-time.After(projectEvery):
			}
		}
	}()
	var once sync.Once
	return func(ev executor.Event) {
			if ev.Phase != "done" && ev.Phase != "failed" {
				return
			}
			select {
			case kick <- struct{}{}:
			default: // a read is due already
			}
		}, func() {
			once.Do(func() {
				close(stop)
				<-finished
			})
		}
}

// projectEvery spaces the projections sent during a run.
const projectEvery = 100 * time.Millisecond

// replacer rewrites old to new in what it writes, line by line (old never spans lines).
type replacer struct {
	w        interface{ Write([]byte) (int, error) }
	old, new []byte
}

func (r *replacer) Write(b []byte) (int, error) {
	if _, err := r.w.Write(bytes.ReplaceAll(b, r.old, r.new)); err != nil {
		return 0, err
	}
	return len(b), nil
}
