package sysbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/plans"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitError   = 1
	ExitChanges = 2 // plan -detailed-exitcode: the plan has changes
	ExitStale   = 3 // a stored plan no longer matches (plans.ErrStale)
)

// Env is what the CLI needs from the process. Tests fill it with buffers and fakes.
type Env struct {
	Stdout, Stderr io.Writer
	Stdin          io.Reader
	Environ        []string                    // os.Environ() form
	LookupEnv      func(string) (string, bool) // nil: derived from Environ
	IsTTY          bool                        // colour only when true
	Version        string
	// Drivers returns the capability registry planning checks against; cmd/sysbox registers
	// the built-in drivers. Nil: planning fails for any action that needs a driver.
	Drivers func() (plans.CapabilityChecker, error)
	// Events, when set, receives every executor event as it is rendered (an agent updates
	// the workspace's projections from them while a run goes on).
	Events func(executor.Event)
	// Checkpoints, when set, receives each checkpoint record's summary once it is durable (an
	// agent sends them as the run's "checkpoint" events for the control plane's web view).
	Checkpoints func(executor.Record)
}

// App is one invocation's shared state, handed to every command.
type App struct {
	Env     *Env
	ChDir   string
	NoColor bool
}

// exitError carries a specific exit code.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// silentExit ends with a code without printing an error (the command already rendered it).
type silentExit struct{ code int }

func (e *silentExit) Error() string { return fmt.Sprintf("exit %d", e.code) }

// ExitCode maps an error from a command to the process exit code.
func ExitCode(err error) int {
	var se *silentExit
	var ee *exitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &se):
		return se.code
	case errors.As(err, &ee):
		return ee.code
	case errors.Is(err, plans.ErrStale):
		return ExitStale
	}
	return ExitError
}

// NewRootCommand builds the command tree.
func NewRootCommand(app *App) *cobra.Command {
	root := &cobra.Command{
		Use:           "sysbox",
		Short:         "Declarative network labs and cyber ranges",
		Long:          "sysbox builds network labs from HCL topologies (*.sysbox.hcl): plan shows what will change, apply makes it so.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       app.Env.Version,
	}
	root.SetOut(app.Env.Stdout)
	root.SetErr(app.Env.Stderr)
	root.PersistentFlags().StringVar(&app.ChDir, "chdir", "", "work in topology directory `DIR` instead of the current one")
	root.PersistentFlags().BoolVar(&app.NoColor, "no-color", false, "never colour output")
	for _, add := range commands {
		root.AddCommand(add(app))
	}
	return root
}

// commands are registered by each command's file (init); other files of this package add
// theirs the same way.
var commands []func(*App) *cobra.Command

func register(f func(*App) *cobra.Command) { commands = append(commands, f) }

// Main runs the CLI with args (without the program name) and returns the exit code.
func Main(ctx context.Context, env *Env, args []string) int {
	if env.LookupEnv == nil {
		env.LookupEnv = lookupIn(env.Environ)
	}
	app := &App{Env: env}
	root := NewRootCommand(app)
	root.SetArgs(normalizeArgs(root, args))
	err := root.ExecuteContext(ctx)
	code := ExitCode(err)
	var se *silentExit
	if err != nil && !errors.As(err, &se) {
		fmt.Fprintf(env.Stderr, "Error: %v\n", err)
	}
	return code
}

func lookupIn(environ []string) func(string) (string, bool) {
	m := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// normalizeArgs turns Terraform-style -flag into --flag for every long flag the tree knows.
func normalizeArgs(root *cobra.Command, args []string) []string {
	long := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		add := func(f *pflag.Flag) { long[f.Name] = true }
		c.Flags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if long[name] {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

// dir is the topology directory.
func (a *App) dir() string {
	if a.ChDir != "" {
		return a.ChDir
	}
	return "."
}

// color reports whether to colour stdout.
func (a *App) color() bool { return a.Env.IsTTY && !a.NoColor }

// IsTerminal reports whether f is a character device (a TTY); used by cmd/sysbox.
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
