package sysbox

import (
	"fmt"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/executor"
)

func init() { register(newResetCommand) }

func newResetCommand(app *App) *cobra.Command {
	var f runFlags
	var rf remoteFlags
	cmd := &cobra.Command{
		Use:   "reset ADDR...",
		Short: "Put nodes back to their baseline by replacing their mutable generation",
		Long: `reset replaces each named node's mutable generation from its immutable baseline: it verifies
the baseline artifact digest, checkpoints the reset, creates the replacement, wires the same
attachments (same MAC and IPs), guest network and routes, starts and observes it, re-installs
the policies living in it, switches the node's external identity in state, and only then deletes
the prior generation after re-checking its ownership markers. No other node is touched.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rf.url != "" {
				return app.runRemote(cmd, &rf, "reset", args, "")
			}
			targets, err := parseAddrs(args)
			if err != nil {
				return err
			}
			rt, err := app.openRuntime(cmd.Context(), &f, true)
			if err != nil {
				return err
			}
			defer rt.close()
			desired, p, err := rt.desired(cmd.Context())
			if err != nil {
				return err
			}
			rt.beginRun("reset")
			res, err := rt.ex.Reset(cmd.Context(), executor.ResetRequest{Targets: targets, Desired: desired, Fingerprint: p.Fingerprint.ActionsDigest})
			rt.endRun(err)
			app.renderRecovered(res.Recovered)
			if s := runSummary("Reset", res); s != "" && res.Done+len(res.Failed) > 0 {
				fmt.Fprintln(app.Env.Stdout, s)
			}
			return withDriftHint(err)
		},
	}
	addRunFlags(cmd, &f)
	addRemoteFlags(cmd, &rf)
	return cmd
}
