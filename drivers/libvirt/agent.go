package libvirt

import (
	"context"
	"fmt"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"

	"zyvor.dev/sysbox/internal/driver/guestvm"
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
	if last := guestvm.WaitReady(ctx, 250*time.Millisecond, ag.Ping); last != nil {
		return fmt.Errorf("guest agent did not answer guest-ping (%v): %w", last, ctx.Err())
	}
	return nil
}

// guestNetConfig is guestvm.NetworkConfig as a value; ok is false when there is nothing to
// configure.
func guestNetConfig(atts []substrate.AttachmentState, routes []substrate.Route) (cfg guestagent.NetworkConfig, ok bool, err error) {
	c, err := guestvm.NetworkConfig(atts, routes)
	if err != nil || c == nil {
		return cfg, false, err
	}
	return *c, true, nil
}
