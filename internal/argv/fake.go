package argv

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// Fake is a scripted Runner for unit tests. It records every call; Script maps a command line
// (argv joined by spaces) or its program name to the result and error to return. Unscripted
// commands succeed with empty output unless Strict is set.
type Fake struct {
	mu     sync.Mutex
	Script map[string]FakeResponse
	Strict bool
	Calls  []Cmd
}

// FakeResponse is what Fake returns for a scripted command.
type FakeResponse struct {
	Result Result
	Err    error
	// Do, when set, runs at call time (e.g. to simulate a hook's side effects).
	Do func(cmd Cmd) (Result, error)
}

var _ Runner = (*Fake)(nil)

// Run records cmd and returns its scripted response.
func (f *Fake) Run(ctx context.Context, cmd Cmd) (Result, error) {
	f.mu.Lock()
	f.Calls = append(f.Calls, cmd)
	resp, ok := f.Script[strings.Join(cmd.Argv, " ")]
	if !ok && len(cmd.Argv) > 0 {
		resp, ok = f.Script[cmd.Argv[0]]
	}
	f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return Result{ExitCode: -1}, err
	}
	if !ok {
		if f.Strict {
			return Result{ExitCode: -1}, fmt.Errorf("fake runner: unscripted command %s", Quote(cmd.Argv))
		}
		return Result{}, nil
	}
	res, err := resp.Result, resp.Err
	if resp.Do != nil {
		res, err = resp.Do(cmd)
	}
	// Like Exec, hand the output to the tees too (callers that stream it see it).
	if cmd.Stdout != nil && len(res.Stdout) > 0 {
		cmd.Stdout.Write(res.Stdout)
	}
	if cmd.Stderr != nil && len(res.Stderr) > 0 {
		cmd.Stderr.Write(res.Stderr)
	}
	return res, err
}

// Argvs returns the recorded command lines, in order.
func (f *Fake) Argvs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(f.Calls))
	for i, c := range f.Calls {
		out[i] = strings.Join(c.Argv, " ")
	}
	return out
}
