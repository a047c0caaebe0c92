package netns

import (
	"context"
	"errors"
	"fmt"
	"os"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/pkg/substrate"
)

// NewGeneration quiesces the prior generation and creates the next one's namespace. Quiescing
// takes every host veth end carrying the prior owner's marker off its bridge and down, and
// downs every non-loopback link inside the prior namespace, so the replacement can take the same
// MACs and addresses on the same bridges. The prior namespace and its process stay until the
// executor deletes them.
func (d *Driver) NewGeneration(ctx context.Context, prior substrate.Handle, priorOwner substrate.Owner, spec substrate.NodeSpec) (substrate.Handle, error) {
	where := fmt.Sprintf("node %s: reset to generation %d", spec.Owner.Address, spec.Owner.Generation)
	if !spec.Owner.SameResource(priorOwner) || spec.Owner.Generation <= priorOwner.Generation {
		return substrate.Handle{}, fmt.Errorf("%s: new owner %+v does not follow prior %+v", where, spec.Owner, priorOwner)
	}
	p, err := decode(prior.Private, kindNode)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: prior: %w", where, err)
	}
	priorNs := d.ns(p.Netns)
	if _, err := os.Stat(priorNs.Path); err == nil {
		if err := checkNsOwned(priorNs, priorOwner); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: prior: %w", where, err)
		}
		if err := quiesceInside(priorNs); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: quiesce prior: %w", where, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return substrate.Handle{}, fmt.Errorf("%s: prior: %w", where, err)
	}
	links, err := linuxnet.HostLinksOf(priorOwner)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	for _, l := range links {
		if err := linuxnet.QuiesceVeth(ctx, l, priorOwner); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: quiesce prior: %w", where, err)
		}
	}
	return d.CreateNode(ctx, spec)
}

func quiesceInside(ns linuxnet.Netns) error {
	nh, err := ns.Netlink()
	if err != nil {
		return err
	}
	defer nh.Close()
	links, err := linuxnet.LinkList(nh)
	if err != nil {
		return fmt.Errorf("netns %s: list links: %w", ns, err)
	}
	for _, l := range links {
		if l.Attrs().Name == "lo" {
			continue
		}
		if err := nh.LinkSetDown(l); err != nil {
			return fmt.Errorf("netns %s: %s down: %w", ns, l.Attrs().Name, err)
		}
	}
	return nil
}
