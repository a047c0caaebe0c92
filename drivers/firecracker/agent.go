package firecracker

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/guestvm"
	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/pkg/substrate"
)

// AgentPort is the guest vsock port sysbox-guest listens on in sysbox's guest image
// (scripts/guest-image: sysbox.vsock_port, default 52).
const AgentPort = 52

// DefaultReadyTimeout bounds how long StartNode waits for the guest agent to answer.
const DefaultReadyTimeout = 60 * time.Second

// agentDial opens one agent stream to r's guest: Firecracker's host side of the vsock device
// (the node's uds_path), "CONNECT AgentPort".
func (d *Driver) agentDial(ctx context.Context, r nodeRecord) (*guestagent.Stream, error) {
	c, err := guestagent.DialFirecrackerVsock(ctx, filepath.Join(d.nodeDir(r.Name), vsockFile), AgentPort)
	if err != nil {
		return nil, err
	}
	return guestagent.NewStream(c), nil
}

// withAgent runs fn with a client on a fresh stream to r's guest agent.
func (d *Driver) withAgent(ctx context.Context, r nodeRecord, fn func(*guestagent.Client) error) error {
	s, err := d.agentDial(ctx, r)
	if err != nil {
		return err
	}
	defer s.Close()
	return fn(guestagent.NewClient(s))
}

// waitAgent polls guest-ping until the guest agent answers, bounded by the ready timeout; the
// error says what the last attempt saw.
func (d *Driver) waitAgent(ctx context.Context, r nodeRecord) error {
	ctx, cancel := context.WithTimeout(ctx, d.readyTimeout)
	defer cancel()
	last := guestvm.WaitReady(ctx, 50*time.Millisecond, func(pctx context.Context) error {
		return d.withAgent(pctx, r, func(c *guestagent.Client) error { return c.Ping(pctx) })
	})
	if last != nil {
		return fmt.Errorf("guest agent on vsock port %d did not answer guest-ping within %s (last: %v): %w", AgentPort, d.readyTimeout, last, driver.ErrUnavailable)
	}
	return nil
}

// Exec runs req.Argv in the guest through the guest agent over vsock (guest-exec, then
// guest-exec-status until it exits). The node's VMM must be running.
func (d *Driver) Exec(ctx context.Context, node substrate.Handle, req substrate.ExecRequest) (substrate.ExecResult, error) {
	what := "exec in firecracker node " + node.ExternalID
	if len(req.Argv) == 0 {
		return substrate.ExecResult{}, fmt.Errorf("%s: empty argv: %w", what, driver.ErrInvalid)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	r, err := d.lookup(node.ExternalID)
	if err != nil {
		return substrate.ExecResult{}, fmt.Errorf("%s: %w", what, err)
	}
	if !isOurVMM(r.PID, r.StartTime, r.Socket) {
		return substrate.ExecResult{}, fmt.Errorf("%s: the VMM process is not running: %w", what, driver.ErrUnavailable)
	}
	res := substrate.ExecResult{ExitCode: -1}
	err = d.withAgent(ctx, r, func(c *guestagent.Client) error {
		res, err = guestvm.Exec(ctx, c, req)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("%s: %s: %w", what, req.Argv[0], err)
	}
	return res, nil
}

// applyNetwork waits for the guest agent and applies cfg (idempotent: ip addr/route replace).
func (d *Driver) applyNetwork(ctx context.Context, r nodeRecord, cfg *guestagent.NetworkConfig) error {
	if err := d.waitAgent(ctx, r); err != nil {
		return err
	}
	if cfg == nil {
		return nil
	}
	return d.withAgent(ctx, r, func(c *guestagent.Client) error { return c.ConfigureNetwork(ctx, *cfg) })
}
