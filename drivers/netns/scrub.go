package netns

import (
	"context"
	"errors"
	"os"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Scrub deletes, through the same ownership-checked calls as destroy, everything Residue finds
// for topology: namespaces first (their veths go with them), then sidecars, bridges, veths and
// forward-accept rules. It is for cleaning up after a failed test or an abandoned topology;
// the errors of every deletion are joined.
func (d *Driver) Scrub(ctx context.Context, topology string) error {
	objs, err := d.Residue(ctx, topology)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range objs {
		switch o.Kind {
		case "netns":
			errs = append(errs, d.DeleteNode(ctx, substrate.Handle{Driver: Name, ExternalID: o.ExternalID, Private: encode(private{Kind: kindNode, Netns: o.ExternalID})}, o.Owner))
		case "netns-sidecar", "netns-hosts", "netns-tempfile":
			if err := os.Remove(o.ExternalID); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	if objs, err = d.Residue(ctx, topology); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, o := range objs {
		switch o.Kind {
		case "bridge":
			errs = append(errs, linuxnet.DeleteBridge(ctx, o.ExternalID, o.Owner))
		case "veth":
			errs = append(errs, linuxnet.DeleteVeth(ctx, o.ExternalID, o.Owner))
		case "nft-rule":
			errs = append(errs, linuxnet.RemoveForwardAccept("", o.Owner))
		}
	}
	return errors.Join(errs...)
}
