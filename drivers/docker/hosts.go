package docker

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var _ driver.Hosts = (*Driver)(nil)

// SetHosts implements driver.Hosts. A container's /etc/hosts is the file Docker keeps at its
// HostsPath and bind-mounts in; Docker rebuilds it when the container starts, so a container
// that is not running gets nothing now (the executor calls again after StartNode) and a
// running one gets the file rewritten in place: Docker's own lines, then the owner's marker
// line and the entries. The file goes with the container.
func (d *Driver) SetHosts(ctx context.Context, node substrate.Handle, owner substrate.Owner, entries []driver.HostEntry) error {
	what := "node " + owner.Address + ": hosts"
	r, ok := d.live.lookup(node.ExternalID)
	if ok {
		if _, err := d.ownedID(ctx, what, node, owner); err != nil {
			return err
		}
	} else {
		ins, err := d.inspectOwned(ctx, what, node, owner)
		if err != nil {
			return err
		}
		r, ok = d.live.note(ins)
	}
	if !ok || r.HostsPath == "" {
		return nil
	}
	cur, err := os.ReadFile(r.HostsPath)
	if err != nil {
		return fmt.Errorf("%s: container %s: %w", what, short(r.ID), err)
	}
	// Docker's lines are what precedes our marker line (if an earlier call wrote one).
	if i := bytes.Index(cur, []byte(linuxnet.HostsMarkerPrefix)); i >= 0 {
		cur = cur[:i]
	}
	if err := linuxnet.WriteHostsInPlace(r.HostsPath, linuxnet.RenderHosts(cur, owner, entries)); err != nil {
		return fmt.Errorf("%s: container %s: %w", what, short(r.ID), err)
	}
	return nil
}
