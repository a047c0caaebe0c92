package netns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Exec runs req.Argv inside the node's namespace (forked from an OS thread switched into it) and
// returns its exit code and bounded output. A non-zero exit is a result, not an error.
func (d *Driver) Exec(ctx context.Context, node substrate.Handle, req substrate.ExecRequest) (substrate.ExecResult, error) {
	if len(req.Argv) == 0 {
		return substrate.ExecResult{}, fmt.Errorf("node %s: exec: empty argv", node.ExternalID)
	}
	ns, err := d.NodeNetns(ctx, node)
	if err != nil {
		return substrate.ExecResult{}, err
	}
	cmd := argv.Cmd{Argv: req.Argv, Env: childEnv(req.Env), Dir: "/", Timeout: req.Timeout}
	if req.Stdin != nil {
		cmd.Stdin = bytes.NewReader(req.Stdin)
	}
	var res argv.Result
	var runErr error
	if err := d.enter(filepath.Base(ns.Path), func() error {
		res, runErr = argv.Exec{}.Run(ctx, cmd)
		return nil
	}); err != nil {
		return substrate.ExecResult{}, fmt.Errorf("node %s: exec %s: %w", node.ExternalID, argv.Quote(req.Argv), err)
	}
	out := substrate.ExecResult{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr}
	var ee *argv.ExitError
	if runErr != nil && !errors.As(runErr, &ee) {
		return out, fmt.Errorf("node %s: exec: %w", node.ExternalID, runErr)
	}
	return out, nil
}
