package netns

import (
	"context"
	"fmt"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/pkg/substrate"
)

// CreateNetwork creates the network's Linux bridge (see linuxnet.CreateBridge for the host
// forward-filter coexistence rule). The handle's ExternalID is the bridge name in the host
// namespace; its envelope kind is substrate.NetworkHandleKindBridge.
func (d *Driver) CreateNetwork(ctx context.Context, spec substrate.NetworkSpec) (substrate.Handle, error) {
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
