package sysbox

import (
	"fmt"

	"github.com/spf13/cobra"
	"zyvor.dev/sysbox/pkg/substrate"
)

func init() { register(newExecCommand) }

func newExecCommand(app *App) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "exec ADDR -- CMD [ARG...]",
		Short: "Run a command inside a node (guest execution)",
		Long: `exec runs CMD inside the node ADDR through its driver's guest-execution capability, prints its
output and exits with its exit code. No shell is involved: the arguments are passed as they are.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			addr, err := parseAddrArg("address", args[0])
			if err != nil {
				return err
			}
			argv := args[1:]
			if dash := cmd.ArgsLenAtDash(); dash >= 0 && dash != 1 {
				return fmt.Errorf("usage: sysbox exec ADDR -- CMD [ARG...]")
			}
			rt, err := app.openRuntime(cmd.Context(), &f, false)
			if err != nil {
				return err
			}
			defer rt.close()
			res, err := rt.ex.Exec(cmd.Context(), addr, substrate.ExecRequest{Argv: argv})
			if err != nil {
				return err
			}
			app.Env.Stdout.Write(res.Stdout)
			app.Env.Stderr.Write(res.Stderr)
			if res.ExitCode != 0 {
				return &silentExit{code: res.ExitCode}
			}
			return nil
		},
	}
	addVarFlags(cmd, &f.vars)
	return cmd
}
