package sysbox

import (
	"fmt"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/internal/graph"
)

func init() { register(newGraphCommand) }

func newGraphCommand(app *App) *cobra.Command {
	var vf varFlags
	cmd := &cobra.Command{
		Use:   "graph",
		Short: "Print the resource dependency graph in Graphviz DOT",
		Long:  "graph prints every resource instance and what it depends on (references and depends_on) as a DOT digraph: sysbox graph | dot -Tsvg > graph.svg",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := app.loadTopology(&vf)
			if err != nil {
				return err
			}
			if l.diags.HasErrors() {
				app.printDiags(app.Env.Stderr, l)
				return &silentExit{code: ExitError}
			}
			g := graph.New()
			for _, r := range l.top.Resources {
				g.Add(r.Addr)
				for _, d := range r.DependsOn {
					g.Connect(r.Addr, d)
				}
			}
			if err := g.Validate(); err != nil {
				return err
			}
			fmt.Fprint(app.Env.Stdout, g.DOT())
			return nil
		},
	}
	addVarFlags(cmd, &vf)
	return cmd
}
