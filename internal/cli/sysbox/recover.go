package sysbox

import (
	"fmt"

	"github.com/spf13/cobra"
)

func init() { register(newRecoverCommand) }

func newRecoverCommand(app *App) *cobra.Command {
	var f runFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "recover",
		Short: "Finish (or clean up after) an interrupted apply, destroy or reset",
		Long: `recover reads the checkpoint of an interrupted run (never log text), verifies that it belongs
to this topology's state (lineage, plan fingerprint), observes every object it recorded through
its driver, adopts what exists, continues the remaining steps or cleans up what was to be
removed, saves the state by compare-and-swap and finishes old-generation cleanup. An unknown
observation or an unavailable driver stops it with the checkpoint kept. Running it again
changes nothing. apply, destroy and reset recover automatically before they start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := app.openRuntime(cmd.Context(), &f, false)
			if err != nil {
				return err
			}
			defer rt.close()
			rt.beginRun("recover")
			rep, err := rt.ex.Recover(cmd.Context())
			rt.endRun(err)
			if asJSON && rep != nil {
				if werr := writeJSON(app.Env.Stdout, rep); werr != nil {
					return werr
				}
			} else if rep != nil {
				if rep.Nothing {
					fmt.Fprintln(app.Env.Stdout, "Nothing to recover: no interrupted run.")
				} else {
					app.renderRecovered(rep)
				}
			}
			return err
		},
	}
	addRunFlags(cmd, &f)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the recovery report as JSON")
	return cmd
}
