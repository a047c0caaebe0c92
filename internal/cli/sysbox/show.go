package sysbox

import (
	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/plans"
)

func init() { register(newShowCommand) }

func newShowCommand(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show PLANFILE",
		Short: "Show a stored plan",
		Long:  "show renders a plan stored with plan -out, as text or, with --json, in the plan JSON format (format_version 1).",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := plans.ReadFile(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(app.Env.Stdout, p)
			}
			renderPlan(app.Env.Stdout, p, app.color())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	return cmd
}
