package guestagent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Transport carries one request to the agent and returns its reply (one JSON object, no
// sentinel, no newline). Stream is one; libvirt's agent command API (virDomainQemuAgentCommand,
// which syncs with guest-sync itself before each command) is the other, adapted in the libvirt
// driver so that this package links no libvirt client.
type Transport interface {
	Command(ctx context.Context, request []byte) (reply []byte, err error)
}

// Client runs the supported commands over a Transport.
type Client struct {
	t Transport
	// Poll bounds the interval between guest-exec-status calls in Exec (default 200ms).
	Poll time.Duration
}

// NewClient returns a client over t.
func NewClient(t Transport) *Client { return &Client{t: t} }

// Call sends execute with args (nil: none) and decodes the reply's return value into out (nil:
// ignore it). An agent error comes back as *Error.
func (c *Client) Call(ctx context.Context, execute string, args, out any) error {
	req := Request{Execute: execute}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return fmt.Errorf("guest agent %s: encode arguments: %w", execute, err)
		}
		req.Arguments = b
	}
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("guest agent %s: encode request: %w", execute, err)
	}
	reply, err := c.t.Command(ctx, b)
	if err != nil {
		return fmt.Errorf("guest agent %s: %w", execute, err)
	}
	r, err := ParseResponse(reply)
	if err != nil {
		return fmt.Errorf("guest agent %s: %w", execute, err)
	}
	if r.Error != nil {
		return fmt.Errorf("guest agent %s: %w", execute, r.Error)
	}
	if out == nil {
		return nil
	}
	if bytes.Equal(bytes.TrimSpace(r.Return), []byte("null")) {
		return fmt.Errorf("guest agent %s: %w: return is null", execute, ErrMalformed)
	}
	if err := json.Unmarshal(r.Return, out); err != nil {
		return fmt.Errorf("guest agent %s: %w: return %s: %v", execute, ErrMalformed, quote(r.Return), err)
	}
	return nil
}

// Sync runs guest-sync with id and checks the agent echoes it: a transport that does not
// resynchronise by itself calls it first (Stream and libvirt's agent API do).
func (c *Client) Sync(ctx context.Context, id int64) error {
	var got int64
	if err := c.Call(ctx, CmdSync, SyncArgs{ID: id}, &got); err != nil {
		return err
	}
	if got != id {
		return fmt.Errorf("guest agent %s: %w: got id %d, want %d (a stale reply)", CmdSync, ErrMalformed, got, id)
	}
	return nil
}

// Ping runs guest-ping: the agent is up and answering.
func (c *Client) Ping(ctx context.Context) error {
	var out map[string]any
	return c.Call(ctx, CmdPing, nil, &out)
}

// Info runs guest-info.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var out Info
	err := c.Call(ctx, CmdInfo, nil, &out)
	return out, err
}

// Interfaces runs guest-network-get-interfaces.
func (c *Client) Interfaces(ctx context.Context) ([]Interface, error) {
	var out []Interface
	err := c.Call(ctx, CmdNetworkInterfaces, nil, &out)
	return out, err
}

// Start runs guest-exec and returns the guest pid.
func (c *Client) Start(ctx context.Context, args ExecArgs) (int64, error) {
	var out ExecStarted
	if err := c.Call(ctx, CmdExec, args, &out); err != nil {
		return 0, err
	}
	if out.PID <= 0 {
		return 0, fmt.Errorf("guest agent %s %s: %w: pid %d", CmdExec, args.Path, ErrMalformed, out.PID)
	}
	return out.PID, nil
}

// Status runs guest-exec-status for pid.
func (c *Client) Status(ctx context.Context, pid int64) (ExecStatus, error) {
	var out ExecStatus
	if err := c.Call(ctx, CmdExecStatus, ExecStatusArgs{PID: pid}, &out); err != nil {
		return ExecStatus{}, err
	}
	if out.Exited && out.ExitCode == nil && out.Signal == nil {
		return ExecStatus{}, fmt.Errorf("guest agent %s pid %d: %w: exited without exit code or signal", CmdExecStatus, pid, ErrMalformed)
	}
	return out, nil
}

// Exec starts args and polls its status until it exits or ctx ends. The returned status has
// Exited set; a non-zero exit is not an error here (the caller judges it, see ExecStatus.Err).
// When ctx ends first the guest process keeps running: the protocol subset has no kill.
func (c *Client) Exec(ctx context.Context, args ExecArgs) (ExecStatus, error) {
	pid, err := c.Start(ctx, args)
	if err != nil {
		return ExecStatus{}, err
	}
	limit := c.Poll
	if limit <= 0 {
		limit = 200 * time.Millisecond
	}
	wait := 5 * time.Millisecond
	for {
		st, err := c.Status(ctx, pid)
		if err != nil {
			return ExecStatus{}, err
		}
		if st.Exited {
			return st, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ExecStatus{}, fmt.Errorf("guest agent exec %s pid %d: %w", args.Path, pid, ctx.Err())
		case <-t.C:
		}
		wait = min(wait*2, limit)
	}
}

// Err reports an exit other than code 0 as an error naming argv and stderr.
func (s ExecStatus) Err(argv ...string) error {
	if !s.Exited {
		return fmt.Errorf("guest exec %q: still running", argv)
	}
	if s.Signal != nil {
		return fmt.Errorf("guest exec %q: killed by signal %d: %s", argv, *s.Signal, bytes.TrimSpace(s.ErrData))
	}
	if s.ExitCode == nil || *s.ExitCode != 0 {
		code := -1
		if s.ExitCode != nil {
			code = *s.ExitCode
		}
		return fmt.Errorf("guest exec %q: exit code %d: %s", argv, code, bytes.TrimSpace(s.ErrData))
	}
	return nil
}

// Run executes argv (argv[0] looked up on the guest's PATH) with captured output and fails on a
// non-zero exit.
func (c *Client) Run(ctx context.Context, argv ...string) (ExecStatus, error) {
	if len(argv) == 0 {
		return ExecStatus{}, fmt.Errorf("guest exec: empty argv")
	}
	st, err := c.Exec(ctx, ExecArgs{Path: argv[0], Arg: argv[1:], CaptureOutput: true})
	if err != nil {
		return ExecStatus{}, err
	}
	return st, st.Err(argv...)
}
