package sysbox

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/spf13/cobra"
)

func init() { register(newOutputCommand) }

func newOutputCommand(app *App) *cobra.Command {
	var f runFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "output [NAME]",
		Short: "Print the topology's outputs from state",
		Long:  `output prints the outputs saved by the last apply (all of them, or NAME's value). Outputs are never secret.`,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rt, err := app.openRuntime(cmd.Context(), &f, false)
			if err != nil {
				return err
			}
			defer rt.close()
			st, err := rt.mgr.Read(cmd.Context())
			if err != nil {
				return err
			}
			if len(args) == 1 {
				o, ok := st.Outputs[args[0]]
				if !ok {
					return fmt.Errorf("output %q: not in state (not declared, not applied yet, or known only after apply)", args[0])
				}
				if asJSON {
					fmt.Fprintln(app.Env.Stdout, string(o.Value))
					return nil
				}
				var s string
				if json.Unmarshal(o.Value, &s) == nil {
					fmt.Fprintln(app.Env.Stdout, s) // a string prints raw, for shell use
				} else {
					fmt.Fprintln(app.Env.Stdout, string(o.Value))
				}
				return nil
			}
			names := make([]string, 0, len(st.Outputs))
			for n := range st.Outputs {
				names = append(names, n)
			}
			sort.Strings(names)
			if asJSON {
				m := map[string]json.RawMessage{}
				for _, n := range names {
					m[n] = st.Outputs[n].Value
				}
				return writeJSON(app.Env.Stdout, m)
			}
			for _, n := range names {
				fmt.Fprintf(app.Env.Stdout, "%s = %s\n", n, st.Outputs[n].Value)
			}
			return nil
		},
	}
	addVarFlags(cmd, &f.vars)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
