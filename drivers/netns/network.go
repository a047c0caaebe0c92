package netns

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// CreateNetwork creates the network's Linux bridge (see linuxnet.CreateBridge for the host
// forward-filter coexistence rule). The handle's ExternalID is the bridge name in the host
// namespace; its envelope kind is substrate.NetworkHandleKindBridge.
func (d *Driver) CreateNetwork(ctx context.Context, spec substrate.NetworkSpec) (substrate.Handle, error) {
	d.ensureRuntime()
	if spec.IPv4CIDR != "" {
		if _, err := linuxnet.ParseIPv4Prefix(spec.IPv4CIDR); err != nil {
			return substrate.Handle{}, fmt.Errorf("network %s: %w", spec.Owner.Address, err)
		}
	}
	name := BridgeName(spec.Owner)
	if err := linuxnet.CreateBridge(ctx, linuxnet.BridgeSpec{Name: name, MTU: spec.MTU, Owner: spec.Owner, IntentDir: d.intentDir()}); err != nil {
		return substrate.Handle{}, fmt.Errorf("network %s: %w", spec.Owner.Address, err)
	}
	return substrate.Handle{Driver: Name, ExternalID: name, Private: encode(private{Kind: kindNetwork, Bridge: name, IPv4CIDR: spec.IPv4CIDR})}, nil
}

// ObserveNetwork observes the bridge (linuxnet.ObserveBridge).
func (d *Driver) ObserveNetwork(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error) {
	p, err := decode(h.Private, kindNetwork)
	if err != nil {
		return substrate.Observation{Status: substrate.Unknown, Reason: err.Error()}, fmt.Errorf("network %s: %w", owner.Address, err)
	}
	return linuxnet.ObserveBridge(ctx, p.Bridge, owner)
}

// DeleteNetwork deletes the bridge after checking its marker.
func (d *Driver) DeleteNetwork(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	p, err := decode(h.Private, kindNetwork)
	if err != nil {
		return fmt.Errorf("network %s: %w", owner.Address, err)
	}
	if err := linuxnet.DeleteBridgeWithIntents(ctx, p.Bridge, owner, d.intentDir()); err != nil {
		return fmt.Errorf("network %s: %w", owner.Address, err)
	}
	return nil
}

// ImportNetwork adopts the host bridge EXTERNAL_ID as spec.Owner's network. The ownership rule
// is ImportNode's: a bridge carrying this resource's marker (any generation) or no alias at all
// is claimed — marked, its MAC pinned and its forward-accept rule added, as CreateNetwork would
// leave it; another resource's marker or a foreign alias is refused with ErrNotOwned, naming
// whose it is. The bridge keeps its name.
func (d *Driver) ImportNetwork(ctx context.Context, externalID string, spec substrate.NetworkSpec) (substrate.Handle, error) {
	where := fmt.Sprintf("import bridge %s as %s", externalID, spec.Owner.Address)
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("%s: incomplete owner: %w", where, driver.ErrNotOwned)
	}
	if !linuxnet.ValidIfName(externalID) {
		return substrate.Handle{}, fmt.Errorf("%s: not an interface name: %w", where, driver.ErrInvalid)
	}
	if spec.IPv4CIDR != "" {
		if _, err := linuxnet.ParseIPv4Prefix(spec.IPv4CIDR); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
		}
	}
	link, err := netlink.LinkByName(externalID)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return substrate.Handle{}, fmt.Errorf("%s: no such link: %w", where, driver.ErrNotFound)
		}
		return substrate.Handle{}, fmt.Errorf("%s: %w: %w", where, driver.ErrUnavailable, err)
	}
	if link.Type() != "bridge" {
		return substrate.Handle{}, fmt.Errorf("%s: link is a %s, not a bridge: %w", where, link.Type(), driver.ErrInvalid)
	}
	if err := claimAlias(where, link.Attrs().Alias, spec.Owner); err != nil {
		return substrate.Handle{}, err
	}
	// Marked with exactly this owner, CreateBridge adopts the bridge and finishes it.
	if err := netlink.LinkSetAlias(link, spec.Owner.Marker()); err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: mark: %w", where, err)
	}
	if err := linuxnet.CreateBridge(ctx, linuxnet.BridgeSpec{Name: externalID, MTU: spec.MTU, Owner: spec.Owner}); err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", where, err)
	}
	return substrate.Handle{Driver: Name, ExternalID: externalID, Private: encode(private{Kind: kindNetwork, Bridge: externalID, IPv4CIDR: spec.IPv4CIDR})}, nil
}

// claimAlias applies the import rule to an object's alias: nil when it is empty or carries
// owner's resource marker (any generation); otherwise an ErrNotOwned error naming whose it is.
func claimAlias(where, alias string, owner substrate.Owner) error {
	prev, err := substrate.ParseMarker(alias)
	switch {
	case err == nil && !prev.SameResource(owner):
		return fmt.Errorf("%s: belongs to %s %s (topology %s): %w", where, prev.Type, prev.Address, prev.Topology, driver.ErrNotOwned)
	case err != nil && alias != "":
		return fmt.Errorf("%s: alias %q is not a sysbox marker; refusing to claim: %w", where, alias, driver.ErrNotOwned)
	}
	return nil
}
