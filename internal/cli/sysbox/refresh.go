package sysbox

import (
	"fmt"
	"sort"

	"github.com/spf13/cobra"
)

func init() { register(newRefreshCommand) }

func newRefreshCommand(app *App) *cobra.Command {
	var f runFlags
	var rf remoteFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "refresh",
		Short: "Observe every resource and record what was seen",
		Long: `refresh observes every resource in state through its driver and saves the observations
(present, absent, drifted, degraded, unknown) by compare-and-swap. Policies are compared by
semantic digest (counters never count). A driver that cannot observe yields unknown — never
absent — and refresh exits 1 naming it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rf.url != "" {
				return app.runRemote(cmd, &rf, "refresh", nil, "")
			}
			rt, err := app.openRuntime(cmd.Context(), &f, true)
			if err != nil {
				return err
			}
			defer rt.close()
			desired, _, err := rt.desired(cmd.Context())
			if err != nil {
				return err
			}
			got, err := rt.ex.Refresh(cmd.Context(), desired)
			if asJSON {
				out := map[string]any{"observations": got}
				if err != nil {
					out["error"] = err.Error()
				}
				if werr := writeJSON(app.Env.Stdout, out); werr != nil {
					return werr
				}
				if err != nil {
					return &silentExit{code: ExitError}
				}
				return nil
			}
			names := make([]string, 0, len(got))
			for a := range got {
				names = append(names, a)
			}
			sort.Strings(names)
			for _, a := range names {
				fmt.Fprintf(app.Env.Stdout, "%s: %s\n", a, got[a])
			}
			return err
		},
	}
	addRunFlags(cmd, &f)
	addRemoteFlags(cmd, &rf)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print observations as JSON")
	return cmd
}
