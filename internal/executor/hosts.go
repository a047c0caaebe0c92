package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/specs"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Attachment aliases (S8): a node resolves the aliases of every attachment on its networks —
// its neighbours' and its own — through its driver's Hosts capability. The set is built once
// per run from the topology as it will be after the run (state, with this run's node actions
// applied), so a node created in the run gets the whole set before it starts, and the nodes
// already running on a network whose members changed get the new set after the run.

// aliasIndex is the topology's attachment aliases by network.
type aliasIndex struct {
	byNet map[string][]driver.HostEntry // network address → entries
	err   error                         // a node's attributes could not be read: fail closed
	// touched are the networks of nodes this run creates, replaces, resets or deletes.
	touched map[string]bool
	// fresh are the nodes this run creates, replaces or resets (they get the set when wired).
	fresh map[string]bool
}

// anyArtifact resolves every artifact reference to an empty identity: aliases need only a
// node's attachments.
type anyArtifact struct{}

func (anyArtifact) Artifact(addrs.Instance) (*substrate.ArtifactIdentity, error) {
	return &substrate.ArtifactIdentity{}, nil
}

// buildAliases indexes the attachments of every node in the working state (as actions leave
// it) that has aliases.
func (r *run) buildAliases(actions []Action) *aliasIndex {
	ix := &aliasIndex{byNet: map[string][]driver.HostEntry{}, touched: map[string]bool{}, fresh: map[string]bool{}}
	nodes := map[string][]specs.Attachment{}
	for _, a := range actions {
		if a.Kind != specs.KindNode {
			continue
		}
		switch a.Op {
		case plans.Create, plans.Replace, plans.Reset:
			ix.fresh[a.Addr.String()] = true
		case plans.Delete:
			ix.fresh[a.Addr.String()] = false // marks deleted: its prior attachments only touch
		}
		if a.Node != nil && a.Op != plans.Delete {
			nodes[a.Addr.String()] = a.Node.Attachments
		}
	}
	var errs []error
	r.sv.view(func(st *states.State) {
		for _, res := range st.Resources {
			addr := res.Addr.String()
			if r.e.kindOf(res.Addr) != specs.KindNode {
				continue
			}
			atts, ok, err := r.e.nodeAttachments(res)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !ok {
				continue
			}
			// A node this run changes leaves the networks it was on too.
			if _, changed := ix.fresh[addr]; changed {
				for _, at := range atts {
					ix.touched[at.Network.String()] = true
				}
			}
			deleted := hasKey(ix.fresh, addr) && !ix.fresh[addr]
			if _, planned := nodes[addr]; !planned && !deleted {
				nodes[addr] = atts
			}
		}
	})
	ix.err = errors.Join(errs...)
	for addr, atts := range nodes {
		for _, at := range atts {
			if ix.fresh[addr] {
				ix.touched[at.Network.String()] = true
			}
			if len(at.Aliases) == 0 || len(at.IPv4) == 0 {
				continue
			}
			p, err := netip.ParsePrefix(at.IPv4[0])
			if err != nil {
				continue // validated at decode; an unparsable one names nothing
			}
			net := at.Network.String()
			ix.byNet[net] = append(ix.byNet[net], driver.HostEntry{Address: p.Addr().String(), Names: at.Aliases})
		}
	}
	return ix
}

// entries returns the host entries of the networks atts are on, one per address, sorted.
func (ix *aliasIndex) entries(atts []specs.Attachment) []driver.HostEntry {
	names := map[string][]string{}
	for _, at := range atts {
		for _, e := range ix.byNet[at.Network.String()] {
			for _, n := range e.Names {
				if !slices.Contains(names[e.Address], n) {
					names[e.Address] = append(names[e.Address], n)
				}
			}
		}
	}
	out := make([]driver.HostEntry, 0, len(names))
	for a, ns := range names {
		out = append(out, driver.HostEntry{Address: a, Names: ns})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out
}

// aliases returns the run's alias index, built from the working state on first use (a run
// that recovers has no action list: its index is the working state's).
func (r *run) aliases() *aliasIndex {
	r.aliasOnce.Do(func() {
		if r.aliasIx == nil {
			r.aliasIx = r.buildAliases(nil)
		}
	})
	return r.aliasIx
}

// setHosts gives op's node the aliases of its networks. A driver without the Hosts capability
// is refused only when there is a name to resolve.
func (r *run) setHosts(ctx context.Context, op *OpState, h substrate.Handle) error {
	a := &op.Action
	if a.Node == nil || len(a.Node.Attachments) == 0 {
		return nil
	}
	ix := r.aliases()
	if ix.err != nil {
		return fmt.Errorf("attachment aliases: %w", ix.err)
	}
	return r.e.setHosts(ctx, a.Driver, a.Addr.String(), h, op.Owner, ix.entries(a.Node.Attachments))
}

func (e *Executor) setHosts(ctx context.Context, driverName, addr string, h substrate.Handle, owner substrate.Owner, entries []driver.HostEntry) error {
	d, err := e.Registry.Driver(driverName)
	if err != nil {
		return err
	}
	hw, ok := d.(driver.Hosts)
	if !ok {
		if len(entries) == 0 {
			return nil
		}
		names := make([]string, 0, len(entries))
		for _, en := range entries {
			names = append(names, strings.Join(en.Names, " "))
		}
		return fmt.Errorf("node %s: driver %s cannot make attachment aliases resolve (%s): it has no hosts support", addr, driverName, strings.Join(names, ", "))
	}
	if err := hw.SetHosts(ctx, h, owner, entries); err != nil {
		return fmt.Errorf("set hosts of %s: %w", addr, err)
	}
	return nil
}

// syncNeighbourHosts, after a run that changed a network's members, gives every other node on
// those networks the new set.
func (r *run) syncNeighbourHosts(ctx context.Context) []error {
	ix := r.aliases()
	if len(ix.touched) == 0 {
		return nil
	}
	if ix.err != nil {
		return []error{fmt.Errorf("attachment aliases: %w", ix.err)}
	}
	type target struct {
		addr, driver string
		h            substrate.Handle
		owner        substrate.Owner
		atts         []specs.Attachment
	}
	var targets []target
	var errs []error
	r.sv.view(func(st *states.State) {
		for _, res := range st.Resources {
			addr := res.Addr.String()
			if ix.fresh[addr] || r.e.kindOf(res.Addr) != specs.KindNode {
				continue
			}
			atts, ok, err := r.e.nodeAttachments(res)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if !ok {
				continue
			}
			if slices.ContainsFunc(atts, func(at specs.Attachment) bool { return ix.touched[at.Network.String()] }) {
				targets = append(targets, target{addr, res.Driver, handleOf(res), res.Owner, atts})
			}
		}
	})
	for _, t := range targets {
		if err := r.e.setHosts(ctx, t.driver, t.addr, t.h, t.owner, ix.entries(t.atts)); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

// nodeAttachments returns the desired attachments recorded in a node's state attributes;
// false when the attributes are the executor's own summary (no handler attributes were
// planned), which records no attachments.
func (e *Executor) nodeAttachments(res *states.Resource) ([]specs.Attachment, bool, error) {
	var sum summary
	if json.Unmarshal(res.Attributes, &sum) == nil && sum.Kind != "" {
		return nil, false, nil
	}
	d, err := e.Resources.DriverSpec(res.Addr.Resource.Type, res.Attributes, anyArtifact{})
	if err != nil || d.Node == nil {
		return nil, false, fmt.Errorf("%s: attributes: %v", res.Addr, err)
	}
	return d.Node.Attachments, true, nil
}
