package guestvm

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/guestagent"
	"zyvor.dev/sysbox/pkg/substrate"
)

// NetworkConfig is the guest network configuration of atts and routes: every IPv4 address of
// every attachment on the NIC with its MAC; the default route via the first attachment gateway,
// or via a route to "default" or an IPv4 /0; other routes as given (host bits cleared: ip refuses
// them). nil when there is nothing to configure.
func NetworkConfig(atts []substrate.AttachmentState, routes []substrate.Route) (*guestagent.NetworkConfig, error) {
	var cfg guestagent.NetworkConfig
	for _, a := range atts {
		if len(a.IPv4) == 0 {
			continue
		}
		nic := guestagent.NetInterface{MAC: a.MAC}
		for _, p := range a.IPv4 {
			if err := checkIPv4Prefix(p); err != nil {
				return nil, fmt.Errorf("attachment %s: %w: %w", a.Name, err, driver.ErrInvalid)
			}
			nic.Addresses = append(nic.Addresses, p)
		}
		cfg.Interfaces = append(cfg.Interfaces, nic)
		if cfg.Gateway == "" && a.Gateway != "" {
			if err := checkIPv4(a.Gateway); err != nil {
				return nil, fmt.Errorf("attachment %s: gateway: %w: %w", a.Name, err, driver.ErrInvalid)
			}
			cfg.Gateway = a.Gateway
		}
	}
	for _, rt := range routes {
		if err := checkIPv4(rt.Via); err != nil {
			return nil, fmt.Errorf("route to %s: %w: %w", rt.To, err, driver.ErrInvalid)
		}
		p, err := netip.ParsePrefix(rt.To)
		switch {
		case rt.To == "default" || err == nil && p.Bits() == 0 && p.Addr().Is4():
			cfg.Gateway = rt.Via
		case err != nil || !p.Addr().Is4():
			return nil, fmt.Errorf("route: destination %q is not an IPv4 prefix: %w", rt.To, driver.ErrInvalid)
		default:
			cfg.Routes = append(cfg.Routes, guestagent.Route{Destination: p.Masked().String(), Via: rt.Via})
		}
	}
	if len(cfg.Interfaces) == 0 && cfg.Gateway == "" && len(cfg.Routes) == 0 {
		return nil, nil
	}
	return &cfg, nil
}

// checkIPv4Prefix accepts "198.51.100.10/24" (an IPv4 address with a prefix length).
func checkIPv4Prefix(s string) error {
	ip, _, err := net.ParseCIDR(s)
	if err != nil {
		return fmt.Errorf("ipv4 prefix %q: %w", s, err)
	}
	if ip.To4() == nil {
		return fmt.Errorf("ipv4 prefix %q: not IPv4", s)
	}
	return nil
}

// checkIPv4 accepts a plain IPv4 address.
func checkIPv4(s string) error {
	if ip := net.ParseIP(s); ip == nil || ip.To4() == nil {
		return fmt.Errorf("ipv4 address %q: not IPv4", s)
	}
	return nil
}

// ExecArgs is the guest-exec request of req: argv, stdin, captured output and the environment
// as sorted K=V pairs.
func ExecArgs(req substrate.ExecRequest) guestagent.ExecArgs {
	args := guestagent.ExecArgs{Path: req.Argv[0], Arg: req.Argv[1:], InputData: req.Stdin, CaptureOutput: true}
	for k, v := range req.Env {
		args.Env = append(args.Env, k+"="+v)
	}
	sort.Strings(args.Env)
	return args
}

// Exec runs req (non-empty argv) through guest-exec and polls guest-exec-status until the
// process exits or ctx ends. The protocol has no kill: a command still running at the deadline
// is left to the guest, and the call returns ctx's error. Exit code -1: no exit code (an error,
// or killed by a signal).
func Exec(ctx context.Context, c *guestagent.Client, req substrate.ExecRequest) (substrate.ExecResult, error) {
	if len(req.Argv) == 0 {
		return substrate.ExecResult{ExitCode: -1}, fmt.Errorf("guest exec: empty argv: %w", driver.ErrInvalid)
	}
	st, err := c.Exec(ctx, ExecArgs(req))
	if err != nil {
		return substrate.ExecResult{ExitCode: -1}, err
	}
	res := substrate.ExecResult{ExitCode: -1, Stdout: st.OutData, Stderr: st.ErrData}
	if st.ExitCode != nil {
		res.ExitCode = *st.ExitCode
	}
	return res, nil
}

// pingTimeout bounds one readiness attempt: an agent that accepted the command but never
// answers must not use up the whole wait.
const pingTimeout = 3 * time.Second

// WaitReady calls ping (each attempt bounded by 3 s) every interval until it answers or ctx
// ends. It returns nil once ping succeeded, else (ctx ended) the last attempt's error, which is
// never nil; the caller words the failure and adds ctx's error or a sentinel as it needs.
func WaitReady(ctx context.Context, interval time.Duration, ping func(context.Context) error) error {
	return WaitReadyWoken(ctx, interval, nil, ping)
}

// WaitReadyWoken is WaitReady where a receive on wake (an event saying the agent may answer
// now, such as libvirt's agent-connected event) ends the pause between attempts early. The
// interval stays the fallback: a missed or absent event only costs the poll it always was. A
// nil wake never fires.
func WaitReadyWoken(ctx context.Context, interval time.Duration, wake <-chan struct{}, ping func(context.Context) error) error {
	for {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		last := ping(pctx)
		cancel()
		if last == nil {
			return nil
		}
		if ctx.Err() != nil { // checked first: a select on two ready channels picks at random
			return last
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return last
		case <-t.C:
		case <-wake:
			t.Stop()
		}
	}
}
