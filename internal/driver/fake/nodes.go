package fake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func (d *Driver) createNode(method string, spec substrate.NodeSpec) (substrate.Handle, error) {
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("fake node: incomplete owner %+v", spec.Owner)
	}
	id := objectID("node", spec.Owner, "")
	m := spec.Owner.Marker()
	if n := d.world.Nodes[id]; n != nil {
		if n.Marker != m {
			return substrate.Handle{}, fmt.Errorf("fake node %s: exists with another owner: %w", id, driver.ErrNotOwned)
		}
		return d.handle(id, m), nil
	}
	n := &Node{ID: id, Marker: m, Owner: spec.Owner, Command: spec.Command}
	if spec.Artifact != nil {
		n.Digest = spec.Artifact.Digest
	}
	for k := range spec.Environment {
		n.EnvKeys = append(n.EnvKeys, k)
	}
	sort.Strings(n.EnvKeys)
	d.world.Nodes[id] = n
	d.lastEnv[id] = spec.Environment
	return d.handle(id, m), d.commit(method)
}

// CreateNode creates (or, for the same owner, returns) a stopped node.
func (d *Driver) CreateNode(ctx context.Context, spec substrate.NodeSpec) (substrate.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "CreateNode"); err != nil {
		return substrate.Handle{}, err
	}
	return d.createNode("CreateNode", spec)
}

// StartNode starts the node (idempotent).
func (d *Driver) StartNode(ctx context.Context, h substrate.Handle, spec substrate.NodeSpec) error {
	return d.setRunning(ctx, "StartNode", h, spec.Owner, true)
}

// setRunning starts or stops the node after checking its marker (idempotent); op names the
// call for failpoints and the world's commit.
func (d *Driver) setRunning(ctx context.Context, op string, h substrate.Handle, owner substrate.Owner, running bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, op); err != nil {
		return err
	}
	n, err := d.ownedNode(h.ExternalID, owner)
	if err != nil {
		return err
	}
	if n.Running == running {
		return nil
	}
	n.Running = running
	return d.commit(op)
}

// ownedNode returns node id after checking its marker against owner.
func (d *Driver) ownedNode(id string, owner substrate.Owner) (*Node, error) {
	n := d.world.Nodes[id]
	if n == nil {
		return nil, fmt.Errorf("fake node %s: %w", id, driver.ErrNotFound)
	}
	if err := owned("node", n.ID, n.Marker, owner); err != nil {
		return nil, err
	}
	return n, nil
}

// ObserveNode reports Present for a running node with its markers and every NIC up, Degraded
// when a NIC it had is gone or down, Drifted when stopped or markers differ.
func (d *Driver) ObserveNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ObserveNode"); err != nil {
		return unknown(h.ExternalID, err)
	}
	n := d.world.Nodes[h.ExternalID]
	if n == nil {
		return absent(h.ExternalID), nil
	}
	obs := observeMarker(n.ID, n.Marker, owner)
	if obs.Status == substrate.Present && !n.Running {
		obs.Status, obs.Reason = substrate.Drifted, "node is not running"
	}
	return obs, nil
}

// StopNode stops the node after checking its marker.
func (d *Driver) StopNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	return d.setRunning(ctx, "StopNode", h, owner, false)
}

// DeleteNode deletes the node, its NICs and its policies after checking the node's marker.
func (d *Driver) DeleteNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "DeleteNode"); err != nil {
		return err
	}
	n, err := d.ownedNode(h.ExternalID, owner)
	if err != nil {
		return err
	}
	// Like a network namespace: its devices and tables go with it.
	nics, pols := d.children(n.ID)
	for _, c := range nics {
		d.idxNIC(c, false)
		delete(d.world.NICs, c.ID)
	}
	for _, p := range pols {
		d.idxPolicy(p, false)
		delete(d.world.Policies, p.ID)
	}
	delete(d.world.Nodes, n.ID)
	delete(d.lastEnv, n.ID)
	return d.commit("DeleteNode")
}

// ---- GuestExec ----

// Exec "runs" argv in a running node: `echo ARGS…` prints them, `env` prints the request's
// environment sorted, `false` exits 1; anything else prints the argv.
func (d *Driver) Exec(ctx context.Context, node substrate.Handle, req substrate.ExecRequest) (substrate.ExecResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "Exec"); err != nil {
		return substrate.ExecResult{}, err
	}
	n := d.world.Nodes[node.ExternalID]
	if n == nil {
		return substrate.ExecResult{}, fmt.Errorf("fake exec: node %s: %w", node.ExternalID, driver.ErrNotFound)
	}
	if !n.Running {
		return substrate.ExecResult{}, fmt.Errorf("fake exec: node %s is not running", n.ID)
	}
	if len(req.Argv) == 0 {
		return substrate.ExecResult{}, errors.New("fake exec: empty argv")
	}
	switch req.Argv[0] {
	case "false":
		return substrate.ExecResult{ExitCode: 1}, nil
	case "env":
		var lines []string
		for k, v := range req.Env {
			lines = append(lines, k+"="+v+"\n")
		}
		sort.Strings(lines)
		return substrate.ExecResult{Stdout: []byte(strings.Join(lines, ""))}, nil
	case "echo":
		return substrate.ExecResult{Stdout: []byte(strings.Join(req.Argv[1:], " ") + "\n")}, nil
	}
	return substrate.ExecResult{Stdout: []byte(strings.Join(req.Argv, " ") + "\n")}, nil
}

// ---- Resetter ----

// NewGeneration quiesces prior (its NICs go down) and creates the replacement for spec.
func (d *Driver) NewGeneration(ctx context.Context, prior substrate.Handle, priorOwner substrate.Owner, spec substrate.NodeSpec) (substrate.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "NewGeneration"); err != nil {
		return substrate.Handle{}, err
	}
	if !spec.Owner.SameResource(priorOwner) || spec.Owner.Generation <= priorOwner.Generation {
		return substrate.Handle{}, fmt.Errorf("fake reset: new owner %+v is not a later generation of %+v", spec.Owner, priorOwner)
	}
	if p := d.world.Nodes[prior.ExternalID]; p != nil {
		if err := owned("node", p.ID, p.Marker, priorOwner); err != nil {
			return substrate.Handle{}, err
		}
		p.Quiesced = true
		nics, _ := d.children(p.ID)
		for _, c := range nics {
			c.Up = false
		}
	}
	return d.createNode("NewGeneration", spec)
}

// ---- Importer ----

// ImportNode adopts a node. The fake's ownership rule: an unmarked (foreign) node is adopted by
// writing owner's marker on it; a marked node is adopted only if its marker names the same
// topology, address and type (any generation; the marker is then rewritten to owner's).
func (d *Driver) ImportNode(ctx context.Context, externalID string, owner substrate.Owner) (substrate.ImportedNode, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ImportNode"); err != nil {
		return substrate.ImportedNode{}, err
	}
	n := d.world.Nodes[externalID]
	if n == nil {
		return substrate.ImportedNode{}, fmt.Errorf("fake import %s: %w", externalID, driver.ErrNotFound)
	}
	if !owner.Complete() {
		return substrate.ImportedNode{}, fmt.Errorf("fake import %s: incomplete owner %+v", externalID, owner)
	}
	if n.Marker != "" {
		got, err := substrate.ParseMarker(n.Marker)
		if err != nil || !got.SameResource(owner) {
			return substrate.ImportedNode{}, fmt.Errorf("fake import %s: %w: marked for %s in topology %s", externalID, driver.ErrNotOwned, got.Address, got.Topology)
		}
	}
	n.Marker, n.Owner, n.Foreign = owner.Marker(), owner, false
	var atts []substrate.AttachmentState
	nics, _ := d.children(n.ID)
	for _, c := range nics {
		{
			c.Marker, c.Owner = n.Marker, owner
			pb, _ := json.Marshal(nicPrivate{ID: c.ID})
			atts = append(atts, substrate.AttachmentState{Name: c.Name, MAC: c.MAC, IPv4: c.IPv4,
				Private: substrate.Envelope{Driver: d.name, Version: envVersion, Data: pb}})
		}
	}
	sort.Slice(atts, func(i, j int) bool { return atts[i].Name < atts[j].Name })
	if err := d.commit("ImportNode"); err != nil {
		return substrate.ImportedNode{}, err
	}
	return substrate.ImportedNode{Handle: d.handle(n.ID, n.Marker), Command: n.Command, Attachments: atts}, nil
}
