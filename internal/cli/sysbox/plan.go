package sysbox

import (
	"fmt"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
)

func init() { register(newPlanCommand) }

type planFlags struct {
	vars     varFlags
	out      string
	detailed bool
	asJSON   bool
	targets  []string
	destroy  bool
}

func newPlanCommand(app *App) *cobra.Command {
	var f planFlags
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what apply would change, optionally storing the plan",
		Long: `plan evaluates the topology, reads the state (read only), and prints one ordered action list:
create, read, no-op, update, replace, delete or unknown for every resource instance, each with
its canonical address, its reason and its diff. With -out the plan is stored durably; apply of
that file refuses it if anything it was computed from has changed since.

Exit codes: 0 ok (with -detailed-exitcode: no changes), 1 error, 2 changes (-detailed-exitcode).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rf.url != "" {
				return app.runRemote(cmd, &rf, "plan", nil, "")
			}
			p, err := app.makePlan(cmd, &f)
			if err != nil {
				return err
			}
			if f.out != "" {
				if err := plans.WriteFile(f.out, p); err != nil {
					return err
				}
			}
			if f.asJSON {
				if err := writeJSON(app.Env.Stdout, p); err != nil {
					return err
				}
			} else {
				renderPlan(app.Env.Stdout, p, app.color())
				if f.out != "" {
					fmt.Fprintf(app.Env.Stdout, "\nSaved the plan to %s. Apply exactly this plan with: sysbox apply %s\n", f.out, f.out)
				}
			}
			if f.detailed && p.HasChanges() {
				return &silentExit{code: ExitChanges}
			}
			return nil
		},
	}
	addVarFlags(cmd, &f.vars)
	cmd.Flags().StringVar(&f.out, "out", "", "store the plan in `FILE`")
	cmd.Flags().BoolVar(&f.detailed, "detailed-exitcode", false, "exit 2 when the plan has changes, 0 when it has none")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the plan as JSON")
	cmd.Flags().StringArrayVar(&f.targets, "target", nil, "plan only `ADDR` and what it depends on (repeatable)")
	cmd.Flags().BoolVar(&f.destroy, "destroy", false, "plan the deletion of everything in state")
	addRemoteFlags(cmd, &rf)
	return cmd
}

// makePlan is shared by plan and (later) apply without a plan file.
func (app *App) makePlan(cmd *cobra.Command, f *planFlags) (*plans.Plan, error) {
	f.vars.once = true // planning reads the evaluated instances only (see ReleaseModules below)
	l, err := app.loadTopology(&f.vars)
	if err != nil {
		return nil, err
	}
	if l.diags.HasErrors() {
		app.printDiags(app.Env.Stderr, l)
		return nil, &silentExit{code: ExitError}
	}
	app.printDiags(app.Env.Stderr, l) // warnings
	// Nothing evaluates the configuration again: its syntax trees and the evaluation's state
	// need not stay live through planning and the plan file.
	l.top.ReleaseModules()
	targets, err := parseTargets(f.targets)
	if err != nil {
		return nil, err
	}
	facts, err := artifactFacts(l.top)
	if err != nil {
		return nil, err
	}
	prior, err := app.priorState(cmd.Context(), l.top)
	if err != nil {
		return nil, err
	}
	// the same registry apply uses (including its test mode), so that a stored plan's driver
	// fingerprint matches the one apply computes; configured from the driver blocks
	reg := l.drivers
	var caps plans.CapabilityChecker = reg
	if app.Env.Drivers != nil {
		if c, err := app.Env.Drivers(); err != nil {
			return nil, fmt.Errorf("drivers: %w", err)
		} else if _, isReg := c.(*driver.Registry); !isReg {
			caps = c // a test's capability fake
		}
	}
	pl := &plans.Planner{Handlers: l.reg, Capabilities: caps, ToolVersion: app.Env.Version}
	return pl.Plan(plans.Request{Topology: l.top, Prior: prior, Facts: facts, Destroy: f.destroy, Targets: targets})
}
