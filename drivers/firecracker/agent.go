package firecracker

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sort"
	"time"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
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
	var last error
	for {
		pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
		last = d.withAgent(pctx, r, func(c *guestagent.Client) error { return c.Ping(pctx) })
		pcancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("guest agent on vsock port %d did not answer guest-ping within %s (last: %v): %w", AgentPort, d.readyTimeout, last, driver.ErrUnavailable)
		case <-time.After(50 * time.Millisecond):
		}
	}
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
	args := guestagent.ExecArgs{Path: req.Argv[0], Arg: req.Argv[1:], InputData: req.Stdin, CaptureOutput: true}
	for k, v := range req.Env {
		args.Env = append(args.Env, k+"="+v)
	}
	sort.Strings(args.Env)
	res := substrate.ExecResult{ExitCode: -1}
	err = d.withAgent(ctx, r, func(c *guestagent.Client) error {
		st, err := c.Exec(ctx, args)
		if err != nil {
			return err
		}
		res.Stdout, res.Stderr = st.OutData, st.ErrData
		if st.ExitCode != nil {
			res.ExitCode = *st.ExitCode
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("%s: %s: %w", what, req.Argv[0], err)
	}
	return res, nil
}

// guestNetwork is the guest network configuration of atts and routes: every IPv4 address of
// every attachment on the NIC with its MAC; the default route via the first gateway, or via
// a route to 0.0.0.0/0; other routes as given. nil when there is nothing to configure.
func guestNetwork(atts []substrate.AttachmentState, routes []substrate.Route) (*guestagent.NetworkConfig, error) {
	var cfg guestagent.NetworkConfig
	for _, a := range atts {
		if len(a.IPv4) == 0 {
			continue
		}
		nic := guestagent.NetInterface{MAC: a.MAC}
		for _, p := range a.IPv4 {
			if _, err := linuxnet.ParseIPv4Prefix(p); err != nil {
				return nil, fmt.Errorf("attachment %s: %w", a.Name, err)
			}
			nic.Addresses = append(nic.Addresses, p)
		}
		cfg.Interfaces = append(cfg.Interfaces, nic)
		if cfg.Gateway == "" && a.Gateway != "" {
			if _, err := linuxnet.ParseIPv4(a.Gateway); err != nil {
				return nil, fmt.Errorf("attachment %s: gateway: %w", a.Name, err)
			}
			cfg.Gateway = a.Gateway
		}
	}
	for _, rt := range routes {
		if _, err := linuxnet.ParseIPv4(rt.Via); err != nil {
			return nil, fmt.Errorf("route to %s: %w", rt.To, err)
		}
		p, err := netip.ParsePrefix(rt.To)
		switch {
		case rt.To == "default" || err == nil && p.Bits() == 0 && p.Addr().Is4():
			cfg.Gateway = rt.Via
		case err != nil || !p.Addr().Is4():
			return nil, fmt.Errorf("route: destination %q is not an IPv4 prefix", rt.To)
		default:
			// ip refuses a destination with host bits set.
			cfg.Routes = append(cfg.Routes, guestagent.Route{Destination: p.Masked().String(), Via: rt.Via})
		}
	}
	if len(cfg.Interfaces) == 0 && cfg.Gateway == "" && len(cfg.Routes) == 0 {
		return nil, nil
	}
	return &cfg, nil
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
