package libvirt

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/guestvm"
	"zyvor.dev/sysbox/pkg/substrate"
)

var _ driver.Hosts = (*Driver)(nil)

// SetHosts implements driver.Hosts through the guest agent: the guest's /etc/hosts keeps its own
// lines (what precedes an earlier call's marker line), then gets the owner's marker line and
// the entries, written to a temporary file and renamed over /etc/hosts in the guest. A domain
// that is not running gets nothing now (the executor calls again after StartNode). The file is
// inside the guest's overlay and goes with the generation.
func (d *Driver) SetHosts(ctx context.Context, node substrate.Handle, owner substrate.Owner, entries []driver.HostEntry) error {
	what := "node " + owner.Address + ": hosts"
	c, dom, _, err := d.lookupOwned(ctx, what, node, owner)
	if err != nil {
		return err
	}
	up, _, err := running(c, dom)
	if err != nil || !up {
		return err
	}
	ag := agentClient(c, dom)
	cur, err := guestvm.Exec(ctx, ag, substrate.ExecRequest{Argv: []string{"cat", "/etc/hosts"}})
	if err != nil {
		return fmt.Errorf("%s: domain %s: read /etc/hosts: %w", what, dom.Name, err)
	}
	base := cur.Stdout
	if cur.ExitCode != 0 { // no file yet: the resolver still wants localhost
		base = []byte("127.0.0.1\tlocalhost\n")
	}
	if i := bytes.Index(base, []byte(linuxnet.HostsMarkerPrefix)); i >= 0 {
		base = base[:i]
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := guestvm.Exec(wctx, ag, substrate.ExecRequest{Argv: []string{"sh", "-c", "cat > /etc/hosts.sysbox && mv /etc/hosts.sysbox /etc/hosts"},
		Stdin: linuxnet.RenderHosts(base, owner, entries)})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	if err != nil {
		return fmt.Errorf("%s: domain %s: write /etc/hosts: %w", what, dom.Name, err)
	}
	return nil
}
