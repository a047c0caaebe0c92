package libvirt

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/pkg/substrate"
)

// domainAgent is the guestagent.Transport of one domain: virDomainQemuAgentCommand, through
// libvirtd (which owns the agent socket and sends guest-sync itself).
type domainAgent struct {
	c   conn
	dom golibvirt.Domain
}

func (a domainAgent) Command(ctx context.Context, req []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// libvirt takes whole seconds; bound every command by the context's deadline, else 10 s.
	timeout := int32(10)
	if dl, ok := ctx.Deadline(); ok {
		if s := int32(time.Until(dl) / time.Second); s < timeout {
			timeout = max(s, 1)
		}
	}
	res, err := a.c.QEMUDomainAgentCommand(a.dom, string(req), timeout, 0)
	if err != nil {
		return nil, apiErr("guest agent of domain "+a.dom.Name, err)
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("guest agent of domain %s: empty reply", a.dom.Name)
	}
	return []byte(res[0]), nil
}

func agentClient(c conn, dom golibvirt.Domain) *guestagent.Client {
	return guestagent.NewClient(domainAgent{c: c, dom: dom})
}

// waitAgent polls guest-ping until it answers or ctx ends; the last error says why not.
func waitAgent(ctx context.Context, ag *guestagent.Client) error {
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		last = ag.Ping(pctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("guest agent did not answer guest-ping (%v): %w", last, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// agentExec runs req through guest-exec and polls guest-exec-status until the process exits or
// ctx ends. The agent protocol has no kill: a command still running at the deadline is left to
// the guest, and the call returns ctx's error.
func agentExec(ctx context.Context, ag *guestagent.Client, req substrate.ExecRequest) (substrate.ExecResult, error) {
	args := guestagent.ExecArgs{Path: req.Argv[0], Arg: req.Argv[1:], InputData: req.Stdin, CaptureOutput: true}
	for k, v := range req.Env {
		args.Env = append(args.Env, k+"="+v)
	}
	sort.Strings(args.Env)
	st, err := ag.Exec(ctx, args)
	if err != nil {
		return substrate.ExecResult{ExitCode: -1}, err
	}
	res := substrate.ExecResult{ExitCode: -1, Stdout: st.OutData, Stderr: st.ErrData}
	if st.ExitCode != nil {
		res.ExitCode = *st.ExitCode
	}
	return res, nil
}

// guestNetConfig is the guest network configuration of atts and routes: the first gateway
// becomes the default route unless a route names 0.0.0.0/0 (or "default"). ok is false when
// there is nothing to configure.
func guestNetConfig(atts []substrate.AttachmentState, routes []substrate.Route) (cfg guestagent.NetworkConfig, ok bool, err error) {
	for _, a := range atts {
		if len(a.IPv4) == 0 {
			continue
		}
		nic := guestagent.NetInterface{MAC: a.MAC}
		for _, p := range a.IPv4 {
			if _, err := linuxnet.ParseIPv4Prefix(p); err != nil {
				return cfg, false, fmt.Errorf("attachment %s: %w", a.Name, err)
			}
			nic.Addresses = append(nic.Addresses, p)
		}
		cfg.Interfaces = append(cfg.Interfaces, nic)
		if cfg.Gateway == "" {
			cfg.Gateway = a.Gateway
		}
	}
	for _, r := range routes {
		if _, err := linuxnet.ParseIPv4(r.Via); err != nil {
			return cfg, false, fmt.Errorf("route to %s: %w", r.To, err)
		}
		if r.To == "0.0.0.0/0" || r.To == "default" {
			cfg.Gateway = r.Via
			continue
		}
		p, err := netip.ParsePrefix(r.To)
		if err != nil || !p.Addr().Is4() {
			return cfg, false, fmt.Errorf("route: destination %q is not an IPv4 prefix", r.To)
		}
		// ip refuses a destination with host bits set.
		cfg.Routes = append(cfg.Routes, guestagent.Route{Destination: p.Masked().String(), Via: r.Via})
	}
	return cfg, len(cfg.Interfaces) > 0 || cfg.Gateway != "" || len(cfg.Routes) > 0, nil
}
