package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Residue lists every object carrying one of topology's markers: namespaces (by their loopback
// marker), sidecar records whose namespace is gone, temporary files of sidecar writes a killed
// process left (tempOwner), and host links (bridges, veth ends) and forward-accept rules.
func (d *Driver) Residue(ctx context.Context, topology string) ([]substrate.Object, error) {
	var out []substrate.Object
	listed := map[string]bool{}
	// A namespace or record that cannot be read may be one of topology's: that is an error, not
	// "clean". One removed between the listing and the read (a parallel delete) is skipped.
	ents, err := os.ReadDir(d.NetnsDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("residue: %w", err)
	}
	for _, e := range ents {
		path := d.nsPath(e.Name())
		mounted, err := netnsMount(path)
		if errors.Is(err, os.ErrNotExist) || err == nil && !mounted {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("residue: netns %s: %w", path, err)
		}
		o, err := nsMarker(d.ns(e.Name()))
		switch {
		case errors.Is(err, errNsUnreadable) && !errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("residue: netns %s: %w", path, err)
		case err == nil && o.Topology == topology:
			out = append(out, substrate.Object{Kind: "netns", ExternalID: e.Name(), Owner: o})
			listed[e.Name()] = true
		}
	}
	scs, err := os.ReadDir(d.StateDir)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("residue: %w", err)
	}
	for _, e := range scs {
		if o, ok := d.tempOwner(e.Name()); ok {
			if o.Topology == topology {
				out = append(out, substrate.Object{Kind: "netns-tempfile", ExternalID: filepath.Join(d.StateDir, e.Name()), Owner: o})
			}
			continue
		}
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || strings.HasPrefix(name, ".") {
			continue
		}
		sc, err := d.readSidecar(name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("residue: sidecar %s: %w", d.sidecarPath(name), err)
		}
		if o, err := ownerFromSidecar(sc); err == nil && o.Topology == topology && !listed[name] {
			out = append(out, substrate.Object{Kind: "netns-sidecar", ExternalID: d.sidecarPath(name), Owner: o})
		}
	}
	hosts, err := d.hostsResidue(topology, listed)
	if err != nil {
		return nil, err
	}
	out = append(out, hosts...)
	intents, err := linuxnet.Intents(d.intentDir(), topology)
	if err != nil {
		return nil, err
	}
	out = append(out, intents...)
	host, err := linuxnet.HostResidue(ctx, topology)
	if err != nil {
		return nil, err
	}
	return append(out, host...), nil
}

// tempOwner reports whether name, an entry of StateDir, is a temporary file of a sidecar write
// (durable.TempTarget) and whose it is: the owner its target sidecar records or, without one,
// the owner its own content records when the write got that far. A temporary file with neither
// (killed before it wrote anything, and before the first sidecar existed) names no owner and
// is not reported: the next sidecar write or DeleteNode of its node, which knows the name,
// removes it (removeStaleTemps).
func (d *Driver) tempOwner(name string) (substrate.Owner, bool) {
	target, ok := durable.TempTarget(name)
	ns, isSidecar := strings.CutSuffix(target, ".json")
	if !ok || !isSidecar || !strings.HasPrefix(ns, netnsPrefix) {
		return substrate.Owner{}, false
	}
	if sc, err := d.readSidecar(ns); err == nil {
		if o, err := ownerFromSidecar(sc); err == nil {
			return o, true
		}
	}
	sc, err := readSidecarFile(filepath.Join(d.StateDir, name))
	if err != nil {
		return substrate.Owner{}, false
	}
	o, err := ownerFromSidecar(sc)
	return o, err == nil
}
