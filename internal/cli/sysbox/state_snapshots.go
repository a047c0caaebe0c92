package sysbox

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"zyvor.dev/sysbox/internal/backend"
)

func init() {
	stateSubcommands = append(stateSubcommands, newStateSnapshotsCommand, newStateRestoreCommand)
}

// ---- state snapshots -------------------------------------------------------------------------

func newStateSnapshotsCommand(app *App) *cobra.Command {
	var sf stateFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "snapshots",
		Short: "List the state snapshots taken before destructive operations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := app.stateManager(cmd.Context(), &sf)
			if err != nil {
				return err
			}
			defer m.Backend().Close()
			d := m.Backend().Describe()
			sn, ok := m.Backend().(backend.Snapshotter)
			if !ok || !d.Capabilities.Has(backend.Snapshot) {
				return &backend.UnsupportedError{Backend: d.Kind, Capability: backend.Snapshot}
			}
			list, err := sn.Snapshots(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []backend.SnapshotInfo{}
				}
				return writeJSON(app.Env.Stdout, list)
			}
			tw := tabwriter.NewWriter(app.Env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSERIAL\tTAKEN\tREASON")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", s.ID, s.Serial, s.Created.UTC().Format(time.RFC3339), s.Reason)
			}
			return tw.Flush()
		},
	}
	addStateFlags(cmd, &sf, false)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// ---- state restore ---------------------------------------------------------------------------

func newStateRestoreCommand(app *App) *cobra.Command {
	var sf stateFlags
	cmd := &cobra.Command{
		Use:   "restore SNAPSHOT_ID",
		Short: "Make a snapshot the current state again",
		Long: "restore saves a snapshot as the next state serial, under the state lock and by compare-and-swap. " +
			"The current state, if readable, is snapshotted first. It repairs a damaged state whose header is intact, " +
			"and refuses a snapshot of another topology or a state written by a newer sysbox. No external object is touched: " +
			"run plan afterwards to see how the restored state compares with what exists.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := app.stateManager(cmd.Context(), &sf)
			if err != nil {
				return err
			}
			defer m.Backend().Close()
			st, err := m.Restore(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(app.Env.Stdout, "Restored snapshot %s as state serial %d (%d resources). No external object was touched.\n", args[0], st.Serial, len(st.Resources))
			return nil
		},
	}
	addStateFlags(cmd, &sf, true)
	return cmd
}
