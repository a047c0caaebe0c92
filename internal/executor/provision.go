package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Provisioners run exactly once per node generation, or the node is tainted: a checkpoint
// record (StepProvisioning) is made durable before the first provisioner starts, and
// StepProvisioned after the last one returned. A run that finds an operation at
// StepProvisioning cannot know what the guest did (a provisioner that creates a user or
// appends a key is not idempotent), so it never runs them again: the node is recorded as
// degraded with ErrProvisionTainted as the reason, and the next plan replaces it.

// StepProvisioning: provisioners may have started; their outcome is unknown until
// StepProvisioned is recorded.
const StepProvisioning Step = "provisioning"

// ErrProvisionTainted says a node's provisioners were interrupted with an unknown outcome.
var ErrProvisionTainted = errors.New("tainted: provisioners were interrupted and their outcome is unknown; they are not run twice, replace the node")

// provisionInterrupted reports whether op's checkpoint says its provisioners had started and
// not finished. Callers take it before anything rewrites op.Step.
func provisionInterrupted(op *OpState) bool { return op.Step == StepProvisioning }

// provision runs the node's provisioners through guest execution, once per generation.
// interrupted says an earlier run had started them on op.Handle without recording the end.
func (r *run) provision(ctx context.Context, op *OpState, interrupted bool) error {
	ps := op.Action.Node.Provisioners
	if len(ps) == 0 || op.Step.atLeast(StepProvisioned) {
		return nil
	}
	if interrupted {
		return fmt.Errorf("node %s: %w", op.Handle.ExternalID, ErrProvisionTainted)
	}
	g, err := driver.Get[driver.GuestExec](r.e.Registry, op.Action.Driver, driver.CapGuestExec)
	if err != nil {
		return err
	}
	plains := make([][]string, len(ps))
	for i, argv := range ps {
		if plains[i], err = r.resolveArgv(ctx, i, argv); err != nil {
			return err
		}
	}
	// Durable before the first provisioner can touch the guest.
	if err := r.ck(op, StepProvisioning); err != nil {
		return err
	}
	for i, plain := range plains {
		res, err := g.Exec(ctx, *op.Handle, substrate.ExecRequest{Argv: plain})
		if r.e.AfterDurable != nil {
			r.e.AfterDurable(PointProvisioner)
		}
		if err != nil {
			return fmt.Errorf("provisioner %d: %w", i+1, err)
		}
		if res.ExitCode != 0 {
			// The command line may hold plaintext: name the provisioner by position only.
			return fmt.Errorf("provisioner %d: exit code %d", i+1, res.ExitCode)
		}
	}
	return r.ck(op, StepProvisioned)
}

// resolveArgv replaces the secret references in provisioner i's argv by their plaintext.
func (r *run) resolveArgv(ctx context.Context, i int, argv []string) ([]string, error) {
	plain := make([]string, len(argv))
	for j, arg := range argv {
		if !strings.Contains(arg, "secret://") {
			plain[j] = arg
			continue
		}
		if r.e.Resolve == nil {
			return nil, fmt.Errorf("provisioner %d: argument %d holds a secret reference but no resolver is configured", i+1, j+1)
		}
		v, err := r.e.Resolve(ctx, arg)
		if err != nil {
			return nil, fmt.Errorf("provisioner %d: argument %d: %w", i+1, j+1, err)
		}
		plain[j] = v
	}
	return plain, nil
}
