package sysbox

import (
	"bufio"
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
)

func init() { register(newApplyCommand) }

type applyFlags struct {
	run         runFlags
	autoApprove bool
	targets     []string
}

func newApplyCommand(app *App) *cobra.Command {
	var f applyFlags
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "apply [PLANFILE]",
		Short: "Make the lab match the configuration (or apply a stored plan)",
		Long: `apply takes the state lock, finishes any interrupted run first (recovery), plans (or, given a
stored plan, re-plans and refuses it field by field if anything it was computed from changed),
asks for approval unless -auto-approve, then executes the actions with bounded parallelism,
checkpointing every critical step so that a crash at any instant is recoverable
(sysbox recover, or simply the next apply).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			planFile := ""
			if len(args) == 1 {
				planFile = args[0]
			}
			if rf.url != "" {
				return app.runRemote(cmd, &rf, "apply", nil, planFile)
			}
			return app.runApply(cmd.Context(), &f, planFile)
		},
	}
	addRunFlags(cmd, &f.run)
	cmd.Flags().BoolVar(&f.autoApprove, "auto-approve", false, "apply without asking for approval")
	cmd.Flags().StringArrayVar(&f.targets, "target", nil, "apply only `ADDR` and what it depends on (repeatable)")
	addRemoteFlags(cmd, &rf)
	return cmd
}

func (a *App) runApply(ctx context.Context, f *applyFlags, planFile string) error {
	var stored *plans.Plan
	if planFile != "" {
		var err error
		if stored, err = plans.ReadFile(planFile); err != nil {
			return err
		}
	}
	rt, err := a.openRuntime(ctx, &f.run, true)
	if err != nil {
		return err
	}
	defer rt.close()
	targets, err := parseTargets(f.targets)
	if err != nil {
		return err
	}
	destroy := false
	if stored != nil {
		if len(targets) > 0 {
			return fmt.Errorf("-target cannot be combined with a stored plan (the plan has its own targets)")
		}
		if targets, err = parseTargets(stored.Targets); err != nil {
			return err
		}
		destroy = stored.Mode == "destroy"
	}
	approved := f.autoApprove || stored != nil // a stored plan was reviewed when it was made
	xp := &executor.Request{Outputs: outputsOf(rt)}
	xp.Prepare = func(ctx context.Context, st *states.State) ([]executor.Action, error) {
		fresh, err := rt.planner.Plan(plans.Request{Topology: rt.l.top, Prior: priorOf(st), Facts: rt.facts, Destroy: destroy, Targets: targets})
		if err != nil {
			return nil, err
		}
		p := fresh
		if stored != nil {
			if err := plans.Verify(stored, fresh); err != nil {
				return nil, fmt.Errorf("stored plan %s is stale; nothing was changed: %w", planFile, err)
			}
			p = stored
		}
		if err := p.Applicable(); err != nil {
			return nil, err
		}
		xp.Fingerprint = p.Fingerprint.ActionsDigest
		if stored == nil {
			renderPlan(a.Env.Stdout, p, a.color())
		}
		if p.HasChanges() && !approved {
			if !a.confirm("Do you want to perform these actions? Only 'yes' will be accepted: ") {
				return nil, fmt.Errorf("apply cancelled; nothing was changed")
			}
		}
		return executor.FromPlan(p, st, rt.l.reg)
	}
	rt.beginRun("apply")
	res, err := rt.ex.Apply(ctx, xp)
	rt.endRun(err)
	a.renderRecovered(res.Recovered)
	if s := runSummary("Apply", res); s != "" && res.Done+len(res.Failed) > 0 {
		fmt.Fprintln(a.Env.Stdout, s)
	}
	if err != nil {
		return withDriftHint(err)
	}
	fmt.Fprintln(a.Env.Stdout, "Apply complete.")
	return nil
}

// priorOf presents st to the planner; a state never saved (serial 0) is the empty state, as
// `sysbox plan` saw it (its fresh lineage is saved by the executor before any provider call).
func priorOf(st *states.State) plans.PriorState {
	if st == nil || st.Serial == 0 {
		return plans.FromState(nil)
	}
	return plans.FromState(st)
}

// confirm asks on stdout and reads one line from stdin.
func (a *App) confirm(prompt string) bool {
	fmt.Fprint(a.Env.Stdout, "\n"+prompt)
	if a.Env.Stdin == nil {
		return false
	}
	line, _ := bufio.NewReader(a.Env.Stdin).ReadString('\n')
	return strings.TrimSpace(line) == "yes"
}

// outputsOf computes the outputs the apply stores in state, evaluated against its final state
// (see storedOutputs in output.go): attributes known only after apply come from state; sensitive
// outputs and outputs holding a secret reference are never stored.
func outputsOf(rt *runtime) func(*states.State) (map[string]states.Output, error) {
	return func(st *states.State) (map[string]states.Output, error) {
		return rt.app.storedOutputs(rt.l.top, st)
	}
}

// parseAddrs parses command-line addresses.
func parseAddrs(args []string) ([]addrs.Instance, error) {
	var out []addrs.Instance
	for _, s := range args {
		a, err := parseAddrArg("address", s)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
