package sysbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"zyvor.dev/sysbox/internal/agent"
	"zyvor.dev/sysbox/internal/controlplane/client"
	"zyvor.dev/sysbox/internal/controlplane/server"
	"zyvor.dev/sysbox/internal/controlplane/wire"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
)

func init() {
	register(newServerCommand)
	register(newAgentCommand)
}

// EnvServerPostgres is the PostgreSQL DSN of `sysbox server` (an environment variable, not a
// flag: a DSN may hold a password, and flags show in the process list).
const EnvServerPostgres = "SYSBOX_SERVER_POSTGRES"

// EnvJoinToken is the one-time join token of `sysbox agent` (not a flag, for the same reason).
const EnvJoinToken = "SYSBOX_JOIN_TOKEN"

func newServerCommand(app *App) *cobra.Command {
	o := server.Options{}
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane's API server",
		Long: `server runs the control plane: the HTTP JSON API under /v1 (OpenAPI document at
/v1/openapi.json), /metrics, and the signed endpoints agents use. It stores everything in SQLite
in the data directory, or in PostgreSQL when ` + EnvServerPostgres + ` holds a DSN. At first start it
writes an admin token to DIR/admin.token (0600). It holds no host rights and runs no lab itself:
agents do (sysbox agent).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Postgres, _ = app.Env.LookupEnv(EnvServerPostgres)
			o.Out = app.Env.Stdout
			o.Log = slog.New(slog.NewTextHandler(app.Env.Stderr, nil))
			return server.Run(cmd.Context(), o)
		},
	}
	cmd.Flags().StringVar(&o.DataDir, "data", "sysbox-server", "data `DIR` (admin token, server key, SQLite database)")
	cmd.Flags().StringVar(&o.Listen, "listen", "127.0.0.1:8787", "listen on `HOST:PORT` (port 0 picks one)")
	cmd.Flags().DurationVar(&o.LeaseTTL, "lease-ttl", 30*time.Second, "lease `TTL` granted to agents (they renew at a third of it)")
	return cmd
}

type agentFlags struct {
	url, data, name string
	drivers         []string
	poll, renew     time.Duration
}

// agentIdentity is what an agent keeps in its data directory after joining (its key is in
// agent.key beside it).
type agentIdentity struct {
	URL       string `json:"url"`
	Agent     string `json:"agent"`
	Project   string `json:"project"`
	ServerKey []byte `json:"server_key"`
}

func newAgentCommand(app *App) *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run a host agent that applies the control plane's runs on this host",
		Long: `agent joins a control plane (first start: with the one-time token in ` + EnvJoinToken + `; its
Ed25519 key and identity stay in the data directory), reports what this host can run, and applies
the runs it claims with the same runtime as sysbox apply, streaming the progress lines as the
run's events. Each run's workspace lives under DIR/workspaces.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return app.runAgent(cmd.Context(), &f)
		},
	}
	cmd.Flags().StringVar(&f.url, "server", "http://127.0.0.1:8787", "the control plane's `URL`")
	cmd.Flags().StringVar(&f.data, "data", "sysbox-agent", "data `DIR` (key, identity, workspaces)")
	cmd.Flags().StringVar(&f.name, "name", "", "agent `NAME` (default: the host name)")
	cmd.Flags().StringSliceVar(&f.drivers, "drivers", nil, "offer only these `NAMES` of the built-in drivers (default: all)")
	cmd.Flags().DurationVar(&f.poll, "poll", 2*time.Second, "longest wait of one claim on the server (a long poll: a run queued meanwhile starts at once); the heartbeat period when idle")
	cmd.Flags().DurationVar(&f.renew, "renew-every", 0, "lease renewal period (default: a third of the lease's TTL as the server grants it)")
	return cmd
}

func (a *App) runAgent(ctx context.Context, f *agentFlags) error {
	if err := durable.MkdirAll(f.data, 0o700); err != nil {
		return fmt.Errorf("agent data dir %s: %w", f.data, err)
	}
	key, err := wire.LoadOrCreateKey(filepath.Join(f.data, "agent.key"))
	if err != nil {
		return err
	}
	caps, err := a.agentCapabilities(f.drivers)
	if err != nil {
		return err
	}
	c, err := a.agentClient(ctx, f, key, caps)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(a.Env.Stderr, nil)).With("agent", c.ID)
	fmt.Fprintf(a.Env.Stdout, "sysbox agent %s (project %s) serving %s with %v\n", c.ID, c.Project, c.URL, caps)
	ag := &agent.Agent{Client: c, Caps: caps, Log: log, Poll: f.poll, RenewEvery: f.renew,
		Run: func(ctx context.Context, j agent.Job) (agent.Outcome, error) { return a.agentRun(ctx, f.data, j) }}
	return ag.Serve(ctx)
}

// agentClient loads the agent's identity, joining first when there is none.
func (a *App) agentClient(ctx context.Context, f *agentFlags, key []byte, caps []string) (*client.Agent, error) {
	path := filepath.Join(f.data, "agent.json")
	b, err := os.ReadFile(path)
	if err == nil {
		var id agentIdentity
		if err := json.Unmarshal(b, &id); err != nil {
			return nil, fmt.Errorf("agent identity %s: %w", path, err)
		}
		if id.URL != f.url {
			return nil, fmt.Errorf("agent identity %s: joined %s, not %s (use another data dir)", path, id.URL, f.url)
		}
		return &client.Agent{URL: id.URL, ID: id.Agent, Project: id.Project, Key: key, ServerKey: id.ServerKey}, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("agent identity %s: %w", path, err)
	}
	token, _ := a.Env.LookupEnv(EnvJoinToken)
	if token == "" {
		return nil, fmt.Errorf("agent %s has not joined yet: set %s to a join token", f.data, EnvJoinToken)
	}
	name := f.name
	if name == "" {
		name, _ = os.Hostname()
	}
	c, err := client.Join(ctx, f.url, nil, token, name, key, caps)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(agentIdentity{URL: f.url, Agent: c.ID, Project: c.Project, ServerKey: c.ServerKey})
	if err != nil {
		return nil, err
	}
	if err := durable.WriteFile(path, out, 0o600); err != nil {
		return nil, fmt.Errorf("agent identity %s: %w", path, err)
	}
	return c, nil
}

// agentCapabilities are what this host can run: "driver:NAME" for each driver of the registry
// (or of only, which must name registered drivers), and what the host offers them.
func (a *App) agentCapabilities(only []string) ([]string, error) {
	reg, err := DriverRegistry(a.Env.LookupEnv)
	if err != nil {
		return nil, err
	}
	names := reg.Names()
	if only != nil {
		for _, n := range only {
			if !slices.Contains(names, n) {
				return nil, fmt.Errorf("--drivers %s: no such driver (known: %s)", n, strings.Join(names, ", "))
			}
		}
		names = only
	}
	var caps []string
	for _, n := range names {
		caps = append(caps, "driver:"+n)
	}
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		caps = append(caps, "docker-socket")
	}
	if _, err := os.Stat("/proc/net/netfilter"); err == nil || os.Geteuid() == 0 {
		caps = append(caps, "nftables")
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err == nil {
		caps = append(caps, "tcg") // KVM is not claimed from /dev/kvm's presence alone (HOST-NOTES)
	}
	return caps, nil
}

// agentRun executes a claimed run in the run's workspace directory with the CLI's own
// commands: a stored plan is applied exactly as `sysbox apply PLANFILE` does, a command run
// as `sysbox OP ARGS` does; their output goes to the control plane as the run's events.
func (a *App) agentRun(ctx context.Context, data string, j agent.Job) (agent.Outcome, error) {
	dir := filepath.Join(data, "workspaces", j.Lease.Run.Workspace)
	if j.Lease.Run.Plan == "" {
		return a.agentCommand(ctx, dir, j)
	}
	result, err := a.agentApply(ctx, dir, j)
	code := ExitOK
	if err != nil {
		code = ExitError
	}
	return agent.Outcome{Result: commandExited(j.Lease.Run.Op, code) + ": " + result, ExitCode: code, Projections: a.projections(ctx, dir)}, err
}

// projections are the workspace's resources as its state holds them (none when it has no
// state yet).
func (a *App) projections(ctx context.Context, dir string) []client.Projection {
	env := *a.Env
	env.Stdout, env.Stderr, env.Stdin = io.Discard, io.Discard, nil
	st, err := (&App{Env: &env, ChDir: dir}).readState(ctx, &stateFlags{})
	if err != nil || st == nil {
		return nil
	}
	return projectionsOf(st)
}

func projectionsOf(st *states.State) []client.Projection {
	var ps []client.Projection
	for _, addr := range st.Addresses() {
		r := st.Resource(addr)
		ps = append(ps, client.Projection{Address: addr.String(), Observation: string(r.Observation.Status), ExternalID: r.ExternalID,
			Generation: int64(r.Owner.Generation)})
	}
	return ps
}

func (a *App) agentApply(ctx context.Context, dir string, j agent.Job) (string, error) {
	if j.Lease.Run.Op != "apply" && j.Lease.Run.Op != "destroy" {
		return "", fmt.Errorf("run %s: op %q of a stored plan is not supported by this agent (apply, destroy)", j.Lease.Run.ID, j.Lease.Run.Op)
	}
	if err := a.unpackRun(dir, j); err != nil {
		return "", err
	}
	planPath := filepath.Join(dir, ".sysbox-run-"+j.Lease.Run.ID+".plan")
	if err := durable.WriteFile(planPath, j.Plan, 0o600); err != nil {
		return "", err
	}
	defer os.Remove(planPath)
	env := *a.Env
	env.Stdout, env.Stderr, env.Stdin, env.IsTTY = j.Progress, j.Errors, nil, false
	env.Checkpoints = checkpointEvents(j)
	var closeProjections func()
	env.Events, closeProjections = a.projectOnEvents(ctx, dir, j)
	defer closeProjections()
	sysbox := func(args ...string) int { return Main(ctx, &env, append(args, "--no-color", "--chdir", dir)) }
	if j.Lease.Epoch > 1 {
		// An earlier holder lost the lease, perhaps mid-apply: resume through the executor's
		// checkpoint recovery (which settles the interrupted steps), not from scratch. The stored
		// plan is stale once recovery wrote state, so what is left is planned afresh from the same
		// revision, and applied only if every change in it is one the stored plan held.
		fmt.Fprintf(j.Progress, "Resuming run %s at lease epoch %d: recovering the interrupted run first.\n", j.Lease.Run.ID, j.Lease.Epoch)
		if code := sysbox("recover"); code != ExitOK {
			return "", fmt.Errorf("run %s: recover exited %d", j.Lease.Run.ID, code)
		}
		rest := filepath.Join(dir, ".sysbox-run-"+j.Lease.Run.ID+".rest.plan")
		defer os.Remove(rest)
		args := []string{"plan", "-out", rest}
		if j.Lease.Run.Op == "destroy" {
			args = append(args, "-destroy")
		}
		if code := sysbox(args...); code != ExitOK {
			return "", fmt.Errorf("run %s: plan after recovery exited %d", j.Lease.Run.ID, code)
		}
		if err := remainderOf(planPath, rest); err != nil {
			return "", fmt.Errorf("run %s: %w", j.Lease.Run.ID, err)
		}
		planPath = rest
	}
	if code := sysbox("apply", planPath); code != ExitOK {
		return "", fmt.Errorf("run %s: apply exited %d", j.Lease.Run.ID, code)
	}
	if j.Lease.Epoch > 1 {
		return "resumed after recovery; apply complete", nil
	}
	return "apply complete", nil
}

// remainderOf checks that every change the plan at rest would make is one the stored plan at
// planned held (same address, same action): after a resumed run's recovery, what is left to do
// must be part of what was reviewed.
func remainderOf(planned, rest string) error {
	stored, err := plans.ReadFile(planned)
	if err != nil {
		return err
	}
	left, err := plans.ReadFile(rest)
	if err != nil {
		return err
	}
	held := map[string]plans.Action{}
	for _, a := range stored.Actions {
		held[a.Address.String()] = a.Action
	}
	var extra []string
	for _, a := range left.Actions {
		if a.Action == plans.NoOp || a.Action == plans.Read {
			continue
		}
		if act, ok := held[a.Address.String()]; !ok || act != a.Action {
			extra = append(extra, fmt.Sprintf("%s %s", a.Action, a.Address))
		}
	}
	if len(extra) > 0 {
		return fmt.Errorf("after recovery the lab needs changes the stored plan did not hold (%s): plan the workspace again", strings.Join(extra, ", "))
	}
	return nil
}
