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

// agentPoll is how often a readiness wait pings an agent that has not connected, when no
// connect event arrives first (see agentWake).
const agentPoll = 250 * time.Millisecond

// waitAgent pings dom's agent until it answers or ctx ends, trying again at once when libvirt
// reports the agent connected (connected, when set, is called then, once) and every poll
// otherwise; the last error says why not.
func waitAgent(ctx context.Context, c conn, dom golibvirt.Domain, poll time.Duration, connected func()) error {
	wake, stop := agentWake(ctx, c, dom, connected)
	defer stop()
	if last := guestvm.WaitReadyWoken(ctx, poll, wake, agentClient(c, dom).Ping); last != nil {
		return fmt.Errorf("guest agent did not answer guest-ping (%v): %w", last, ctx.Err())
	}
	return nil
}

// agentWake subscribes to libvirt's agent lifecycle events and returns a channel that receives
// when dom's guest agent connects, and stop, which ends the subscription. libvirtd connects to
// the agent channel only once the guest opens its end, and until then every agent command
// fails at once, so that event is the moment a ping can first answer. Subscribed before the
// first ping, no connect is missed: one that came earlier makes that ping answer. When the
// subscription fails, wake is nil and the wait polls only.
func agentWake(ctx context.Context, c conn, dom golibvirt.Domain, connected func()) (wake <-chan struct{}, stop func()) {
	sctx, cancel := context.WithCancel(ctx)
	evs, err := c.SubscribeEvents(sctx, golibvirt.DomainEventIDAgentLifecycle, golibvirt.OptDomain{dom})
	if err != nil {
		cancel()
		return nil, func() {}
	}
	w := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Read to the end: go-libvirt's sender blocks on this channel until it sees the
		// cancellation, and only then deregisters the callback.
		for ev := range evs {
			m, ok := ev.(*golibvirt.DomainEventCallbackAgentLifecycleMsg)
			if ok && m.Dom.UUID == dom.UUID && m.State == int32(golibvirt.ConnectDomainEventAgentLifecycleStateConnected) {
				if connected != nil {
					connected()
					connected = nil
				}
				select {
				case w <- struct{}{}:
				default: // one pending wake is enough
				}
			}
		}
	}()
	return w, func() {
		cancel()
		<-done
	}
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
