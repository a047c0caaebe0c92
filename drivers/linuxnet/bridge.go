package linuxnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// BridgeSpec is a Linux bridge in the host namespace owned by a topology resource.
type BridgeSpec struct {
	Name  string // ≤ 15 bytes
	MTU   int    // 0: kernel default
	Owner substrate.Owner
	// IntentDir, when set, holds intent records that let a re-run adopt a bridge created by a
	// process killed before it could mark it (see intent.go).
	IntentDir string
}

// CreateBridge creates the bridge (up, alias = owner marker, MAC = BridgeMAC(owner)) and, where
// the host's forward filter would drop bridged traffic (dockerd's FORWARD policy DROP with
// br_netfilter), the owner-marked forward-accept rule for it (see EnsureForwardAccept). An
// existing bridge carrying exactly spec.Owner's marker is adopted (and its MAC pinned); any other
// link with that name is refused with an error wrapping driver.ErrNotOwned and left alone.
func CreateBridge(ctx context.Context, spec BridgeSpec) error {
	if !ValidIfName(spec.Name) {
		return fmt.Errorf("bridge %q: invalid interface name", spec.Name)
	}
	if !spec.Owner.Complete() {
		return fmt.Errorf("bridge %s: incomplete owner %+v", spec.Name, spec.Owner)
	}
	marker := spec.Owner.Marker()
	link, err := netlink.LinkByName(spec.Name)
	switch {
	case err == nil:
		if adoptUnmarked(spec.IntentDir, "bridge", spec.Name, link.Attrs().Alias, spec.Owner) {
			if err := netlink.LinkSetAlias(link, marker); err != nil {
				return fmt.Errorf("bridge %s: mark: %w", spec.Name, err)
			}
			clearIntent(spec.IntentDir, spec.Name)
		} else if err := checkOwned("bridge", link, spec.Owner); err != nil {
			return err
		}
		if link.Type() != "bridge" {
			return fmt.Errorf("bridge %s: is a %s: %w", spec.Name, link.Type(), driver.ErrNotOwned)
		}
		// A bridge made before the MAC was pinned (or changed by hand) gets its MAC pinned.
		if mac := BridgeMAC(spec.Owner); !bytes.Equal(link.Attrs().HardwareAddr, mac) {
			if err := netlink.LinkSetHardwareAddr(link, mac); err != nil {
				return fmt.Errorf("bridge %s: set mac %s: %w", spec.Name, mac, err)
			}
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("bridge %s: up: %w", spec.Name, err)
		}
	case isNotFound(err):
		if err := writeIntent(spec.IntentDir, spec.Name, spec.Owner); err != nil {
			return fmt.Errorf("bridge %s: %w", spec.Name, err)
		}
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: spec.Name, MTU: spec.MTU, Alias: marker, Flags: net.FlagUp, TxQLen: -1,
			HardwareAddr: BridgeMAC(spec.Owner)}} // pinned: see BridgeMAC
		if err := netlink.LinkAdd(br); err != nil {
			clearIntent(spec.IntentDir, spec.Name)
			if errors.Is(err, unix.EEXIST) {
				return CreateBridge(ctx, spec) // lost a race: adopt or refuse
			}
			return fmt.Errorf("bridge %s: create: %w", spec.Name, err)
		}
		// The kernel ignores IFLA_IFALIAS on creation; set it right after. A bridge left
		// without it by a crash in between is never adopted or deleted (no marker).
		if err := netlink.LinkSetAlias(br, marker); err != nil {
			_ = netlink.LinkDel(br)
			clearIntent(spec.IntentDir, spec.Name)
			return fmt.Errorf("bridge %s: mark: %w", spec.Name, err)
		}
		clearIntent(spec.IntentDir, spec.Name)
	default:
		return fmt.Errorf("bridge %s: %w: %w", spec.Name, driver.ErrUnavailable, err)
	}
	if _, err := EnsureForwardAccept(spec.Name, spec.Owner); err != nil {
		return fmt.Errorf("bridge %s: %w", spec.Name, err)
	}
	return nil
}

// ObserveBridge reports the bridge: Absent when no link has the name; Drifted when the link is
// not a bridge, is down, or carries no or another owner's marker (Owner says which); Degraded
// when the host's forward filter would drop its traffic and the accept rule is missing.
func ObserveBridge(ctx context.Context, name string, owner substrate.Owner) (substrate.Observation, error) {
	obs := substrate.Observation{ExternalID: name, At: time.Now().UTC()}
	link, err := netlink.LinkByName(name)
	if isNotFound(err) {
		obs.Status = substrate.Absent
		return obs, nil
	}
	if err != nil {
		obs.Status = substrate.Unknown
		obs.Reason = err.Error()
		return obs, fmt.Errorf("bridge %s: %w: %w", name, driver.ErrUnavailable, err)
	}
	found, perr := substrate.ParseMarker(link.Attrs().Alias)
	if perr == nil {
		obs.Owner = &found
	}
	switch {
	case perr != nil || !found.Equal(owner):
		obs.Status = substrate.Drifted
		obs.Reason = "a link named " + name + " exists without this resource's ownership marker"
	case link.Type() != "bridge":
		obs.Status = substrate.Drifted
		obs.Reason = "link is a " + link.Type() + ", not a bridge"
	case link.Attrs().Flags&net.FlagUp == 0:
		obs.Status = substrate.Drifted
		obs.Reason = "bridge is down"
	default:
		obs.Status = substrate.Present
		needed, present, err := forwardRuleState(name, owner)
		if err != nil {
			obs.Status = substrate.Unknown
			obs.Reason = err.Error()
			return obs, fmt.Errorf("bridge %s: %w: %w", name, driver.ErrUnavailable, err)
		}
		if needed && !present {
			obs.Status = substrate.Degraded
			obs.Reason = "the host's forward filter (ip filter FORWARD) would drop bridged traffic and the accept rule for this bridge is missing"
		}
		obs.Attributes = map[string]string{"mtu": fmt.Sprint(link.Attrs().MTU), "forward_accept_rule": fmt.Sprint(needed && present),
			"mac": link.Attrs().HardwareAddr.String(), "mac_pinned": fmt.Sprint(bytes.Equal(link.Attrs().HardwareAddr, BridgeMAC(owner)))}
	}
	return obs, nil
}

// DeleteBridge removes the bridge and its forward-accept rule after checking the marker. A
// missing bridge is not an error (its rule, if any, is still removed).
func DeleteBridge(ctx context.Context, name string, owner substrate.Owner) error {
	return DeleteBridgeWithIntents(ctx, name, owner, "")
}

// DeleteBridgeWithIntents is DeleteBridge for callers that create with BridgeSpec.IntentDir: an
// unmarked bridge that an intent of exactly owner names is deleted too, and the intent removed.
func DeleteBridgeWithIntents(ctx context.Context, name string, owner substrate.Owner, intentDir string) error {
	link, err := netlink.LinkByName(name)
	if isNotFound(err) {
		clearIntent(intentDir, name)
		return RemoveForwardAccept(name, owner)
	}
	if err != nil {
		return fmt.Errorf("bridge %s: %w: %w", name, driver.ErrUnavailable, err)
	}
	if !adoptUnmarked(intentDir, "bridge", name, link.Attrs().Alias, owner) {
		if err := checkOwned("bridge", link, owner); err != nil {
			return err
		}
	}
	if err := RemoveForwardAccept(name, owner); err != nil {
		return fmt.Errorf("bridge %s: %w", name, err)
	}
	if err := deleteHostLink(link); err != nil { // batched with concurrent bridge deletions (reap.go)
		return fmt.Errorf("bridge %s: delete: %w", name, err)
	}
	clearIntent(intentDir, name)
	return nil
}

// checkOwned compares a link's alias marker with owner exactly.
func checkOwned(kind string, link netlink.Link, owner substrate.Owner) error {
	name := link.Attrs().Name
	if !owner.Complete() {
		return fmt.Errorf("%s %s: incomplete ownership evidence %+v: %w", kind, name, owner, driver.ErrNotOwned)
	}
	found, err := substrate.ParseMarker(link.Attrs().Alias)
	if err != nil {
		return fmt.Errorf("%s %s: no sysbox ownership marker (alias %q): %w", kind, name, link.Attrs().Alias, driver.ErrNotOwned)
	}
	if !found.Equal(owner) {
		return fmt.Errorf("%s %s: owned by %s %s generation %d (topology %s), not %s generation %d: %w",
			kind, name, found.Type, found.Address, found.Generation, found.Topology, owner.Address, owner.Generation, driver.ErrNotOwned)
	}
	return nil
}

func isNotFound(err error) bool {
	if err == nil {
		return false
	}
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}
