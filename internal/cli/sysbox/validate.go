package sysbox

import (
	"fmt"

	"github.com/spf13/cobra"
)

func init() { register(newValidateCommand) }

func newValidateCommand(app *App) *cobra.Command {
	var vf varFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check the topology: syntax, references, types, and every resource's own rules",
		Long: `validate reads every *.sysbox.hcl file of the topology and its modules, evaluates it with the
given variables, and reports every problem at once with file:line:column. A required variable
without a value is a warning: what depends on it is not checked. It reads no state and touches
nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			vf.validateOnly, vf.once = true, true
			l, err := app.loadTopology(&vf)
			if err != nil {
				return err
			}
			valid := !l.diags.HasErrors()
			if asJSON {
				if err := writeJSON(app.Env.Stdout, map[string]any{"format_version": "1", "valid": valid,
					"error_count": countSev(l, true), "warning_count": countSev(l, false), "diagnostics": toJSONDiags(l.diags)}); err != nil {
					return err
				}
			} else {
				app.printDiags(app.Env.Stderr, l)
				if valid {
					fmt.Fprintf(app.Env.Stdout, "The topology is valid: %d resource instance(s).\n", len(l.top.Resources))
				}
			}
			if !valid {
				return &silentExit{code: ExitError}
			}
			return nil
		},
	}
	addVarFlags(cmd, &vf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func countSev(l *loaded, errors bool) int {
	n := 0
	for _, d := range l.diags {
		if (d.Severity == 1) == errors {
			n++
		}
	}
	return n
}
