package sysbox

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
)

func init() { register(newDestroyCommand) }

type destroyFlags struct {
	run         runFlags
	autoApprove bool
	asJSON      bool
}

func newDestroyCommand(app *App) *cobra.Command {
	var f destroyFlags
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "destroy",
		Short: "Delete everything the topology owns, then audit for residue",
		Long: `destroy plans the deletion of everything in state (lifecycle.prevent_destroy makes it fail
before anything is touched), deletes in reverse dependency order — each driver re-checks the
ownership markers of every object before deleting it and refuses on mismatch or incomplete
evidence — and ends with a residue audit: each driver the topology uses (named in its state, its
configuration's resources or its substrate block) lists objects still carrying this topology's
markers; other drivers are not asked. A used driver that cannot answer fails destroy (unknown is
not absent). Exit code 1 when anything is left.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rf.url != "" {
				return app.runRemote(cmd, &rf, "destroy", nil, "")
			}
			return app.runDestroy(cmd.Context(), &f)
		},
	}
	addRunFlags(cmd, &f.run)
	cmd.Flags().BoolVar(&f.autoApprove, "auto-approve", false, "destroy without asking for approval")
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the residue audit as JSON")
	addRemoteFlags(cmd, &rf)
	return cmd
}

func (a *App) runDestroy(ctx context.Context, f *destroyFlags) error {
	rt, err := a.openRuntime(ctx, &f.run, false)
	if err != nil {
		return err
	}
	defer rt.close()
	xp := &executor.Request{Drivers: configDrivers(rt.l.top)}
	xp.Prepare = func(ctx context.Context, st *states.State) ([]executor.Action, error) {
		p, err := rt.planner.Plan(plans.Request{Topology: rt.l.top, Prior: priorOf(st), Destroy: true})
		if err != nil {
			return nil, err
		}
		if err := p.Applicable(); err != nil {
			return nil, err
		}
		xp.Fingerprint = p.Fingerprint.ActionsDigest
		if !f.asJSON {
			renderPlan(a.Env.Stdout, p, a.color())
		}
		if p.HasChanges() && !f.autoApprove {
			if !a.confirm("Do you really want to destroy everything this topology owns? Only 'yes' will be accepted: ") {
				return nil, fmt.Errorf("destroy cancelled; nothing was changed")
			}
		}
		return executor.FromPlan(p, st, rt.l.reg)
	}
	rt.beginRun("destroy")
	res, residue, err := rt.ex.Destroy(ctx, xp)
	rt.endRun(err)
	a.renderRecovered(res.Recovered)
	var re *executor.ResidueError
	if f.asJSON {
		type out struct {
			Done    int    `json:"done"`
			Failed  int    `json:"failed"`
			Residue any    `json:"residue"`
			Error   string `json:"error,omitempty"`
		}
		o := out{Done: res.Done, Failed: len(res.Failed), Residue: residue}
		if residue == nil {
			o.Residue = []any{}
		}
		if err != nil {
			o.Error = err.Error()
		}
		if werr := writeJSON(a.Env.Stdout, o); werr != nil {
			return werr
		}
		if err != nil {
			return &silentExit{code: ExitError}
		}
		return nil
	}
	if s := runSummary("Destroy", res); s != "" && res.Done+len(res.Failed) > 0 {
		fmt.Fprintln(a.Env.Stdout, s)
	}
	if errors.As(err, &re) {
		fmt.Fprintln(a.Env.Stdout, re.Error())
		return &silentExit{code: ExitError}
	}
	if err != nil {
		return err
	}
	if len(res.AuditSkipped) > 0 {
		fmt.Fprintf(a.Env.Stdout, "Residue audit skipped driver(s) the configuration declares but this sysbox does not provide (nothing was made with them): %s\n", strings.Join(res.AuditSkipped, ", "))
	}
	if len(res.Audited) > 0 {
		fmt.Fprintf(a.Env.Stdout, "Residue audit asked this topology's driver(s): %s\n", strings.Join(res.Audited, ", "))
	}
	fmt.Fprintln(a.Env.Stdout, "Destroy complete. Residue audit: no object carries this topology's markers.")
	return nil
}

// configDrivers names the drivers the configuration declares in its substrate block and the
// drivers its resources select (after defaults), sorted: with the drivers in state, the ones
// destroy's residue audit consults. Other registered drivers are not asked, so an unreachable
// daemon the topology never uses (dockerd for a netns-only lab) does not fail destroy.
func configDrivers(top *config.Topology) []string {
	if top == nil {
		return nil
	}
	set := map[string]bool{}
	if top.Substrate.Explicit {
		for _, d := range top.Substrate.Drivers {
			set[d.Name] = true
		}
	}
	for _, ri := range top.Resources {
		if ri == nil || ri.Config == nil {
			continue
		}
		v := reflect.ValueOf(ri.Config)
		for v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			continue
		}
		if f := v.FieldByName("Driver"); f.IsValid() && f.Kind() == reflect.String && f.String() != "" {
			set[f.String()] = true
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
