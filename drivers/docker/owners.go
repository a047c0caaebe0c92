package docker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// The Engine API cannot change an existing container's labels, and container ids are never
// reused. So the owner a container id's labels name is fixed for as long as that container
// exists, and a label check made once for an id stays true for it. The driver remembers the
// owners it has read — from an inspect, from its own create, or from the one list of a
// topology's containers that a destructive run makes — and checks later calls against them by
// id instead of inspecting again. Every call then acts on exactly that id, so a container that
// was removed or replaced meanwhile fails at the daemon (not found) or, being another id, is
// inspected afresh.

// What the driver remembers of an id holds only while the container exists. A driver can
// outlive containers removed behind its back (`docker rm` while the control plane's host agent
// runs): when the daemon answers that an id does not exist, the driver forgets everything it
// remembered of it and the list of its topology (containerErr), so that no later call is
// answered "exists, owned" from memory.

// ownerCache maps full container ids to the complete owner their labels name.
type ownerCache struct {
	mu     sync.Mutex
	byID   map[string]substrate.Owner
	fresh  map[string]bool // created by this driver and not started yet
	listed map[string]bool // topologies whose containers were listed
	listMu sync.Mutex      // one list of a topology at a time
}

// remember records the owner labels name for id; incomplete or inconsistent labels are not
// remembered (such a container is inspected, and refused, every time).
func (c *ownerCache) remember(id string, labels map[string]string) {
	o, ok := ownerFromLabels(labels)
	if !ok || !containerIDRE.MatchString(id) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]substrate.Owner{}
	}
	c.byID[id] = o
}

// lookup returns the owner remembered for id.
func (c *ownerCache) lookup(id string) (substrate.Owner, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o, ok := c.byID[id]
	return o, ok
}

// forget drops id (its container was removed).
func (c *ownerCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.byID, id)
	delete(c.fresh, id)
}

// unlist forgets that topology's containers were listed (the next ownedID lists them again).
func (c *ownerCache) unlist(topology string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.listed, topology)
}

// containerErr is apiErr for a call on container id. When the daemon says the id does not
// exist, the driver forgets what it remembered of it (see above).
func (d *Driver) containerErr(what, id string, err error) error {
	err = apiErr(what, err)
	if errors.Is(err, driver.ErrNotFound) {
		if o, ok := d.owners.lookup(id); ok {
			d.owners.unlist(o.Topology)
		}
		d.owners.forget(id)
		d.live.forget(id)
	}
	return err
}

// setFresh marks id as created here and not yet started (or clears the mark).
func (c *ownerCache) setFresh(id string, fresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fresh == nil {
		c.fresh = map[string]bool{}
	}
	if fresh {
		c.fresh[id] = true
	} else {
		delete(c.fresh, id)
	}
}

func (c *ownerCache) isFresh(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fresh[id]
}

// listOnce lists topology's containers once per driver and remembers their owners (a failed
// list is tried again by the next call).
func (d *Driver) listOnce(ctx context.Context, topology string) error {
	c := &d.owners
	c.listMu.Lock()
	defer c.listMu.Unlock()
	c.mu.Lock()
	done := c.listed[topology]
	c.mu.Unlock()
	if done {
		return nil
	}
	list, err := d.listOwned(ctx, topology, "")
	if err != nil {
		return err
	}
	for _, ct := range list {
		c.remember(ct.ID, ct.Labels)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listed == nil {
		c.listed = map[string]bool{}
	}
	c.listed[topology] = true
	return nil
}

// ownedID checks that h's container belongs to owner and returns its id, asking the daemon only
// when the id's owner is not known yet: first with one list of owner's topology (a destroy
// removes many containers of it), then, for an id the list did not show, with an inspect. A
// mismatch is ErrNotOwned, as checkOwned says it.
func (d *Driver) ownedID(ctx context.Context, what string, h substrate.Handle, owner substrate.Owner) (string, error) {
	if h.ExternalID == "" {
		return "", fmt.Errorf("%s: handle has no container id", what)
	}
	if _, ok := d.owners.lookup(h.ExternalID); !ok && owner.Topology != "" {
		if err := d.listOnce(ctx, owner.Topology); err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
	}
	if got, ok := d.owners.lookup(h.ExternalID); ok {
		return h.ExternalID, checkOwned(fmt.Sprintf("%s: container %s", what, short(h.ExternalID)), ownerLabels(got), owner)
	}
	ins, err := d.inspectOwned(ctx, what, h, owner)
	if err != nil {
		return "", err
	}
	return ins.ID, nil
}
