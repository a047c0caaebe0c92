package fake

import (
	"encoding/json"
	"fmt"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Calls returns the method names called so far, in order.
func (d *Driver) Calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.calls...)
}

// CountCalls returns how many times method was called.
func (d *Driver) CountCalls(method string) int {
	n := 0
	for _, c := range d.Calls() {
		if c == method {
			n++
		}
	}
	return n
}

// World returns a deep copy of the world.
func (d *Driver) World() World {
	d.mu.Lock()
	defer d.mu.Unlock()
	b, _ := json.Marshal(&d.world)
	var w World
	_ = json.Unmarshal(b, &w)
	w.fill()
	return w
}

// LastEnvironment returns the environment the node was created with (memory only).
func (d *Driver) LastEnvironment(nodeID string) map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lastEnv[nodeID]
}

// ---- test helpers that change the world behind sysbox's back ----

// SetArtifact sets the content behind an artifact source (changing it changes its digest).
func (d *Driver) SetArtifact(source, content string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.world.Artifacts == nil {
		d.world.Artifacts = map[string]string{}
	}
	d.world.Artifacts[source] = content
	return d.persist()
}

// AddForeignNode creates a running node that sysbox did not create (no marker).
func (d *Driver) AddForeignNode(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.world.Nodes[id] = &Node{ID: id, Running: true, Foreign: true}
	return d.persist()
}

// AddForeignAt creates an unmarked object of kind (KindNode, KindNetwork or KindPolicy) at
// the id the fake would give owner's object (a policy's id also names its node), as if
// someone else had taken the name, and returns that id.
func (d *Driver) AddForeignAt(kind string, owner substrate.Owner, node string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var id string
	switch kind {
	case KindNode:
		id = objectID("node", owner, "")
		d.world.Nodes[id] = &Node{ID: id, Running: true, Foreign: true}
	case KindNetwork:
		id = objectID("net", owner, "")
		d.world.Networks[id] = &Network{ID: id}
	case KindPolicy:
		id = policyID(node, owner)
		d.world.Policies[id] = &Policy{ID: id, Node: node, Digest: "foreign"}
		d.idxPolicy(d.world.Policies[id], true)
	default:
		return "", fmt.Errorf("fake: foreign object of kind %q: want %s, %s or %s", kind, KindNode, KindNetwork, KindPolicy)
	}
	return id, d.persist()
}

// Remove deletes any object by id behind sysbox's back (simulating drift or outside deletion).
func (d *Driver) Remove(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.world.Networks, id)
	if d.world.Nodes[id] != nil {
		for cid, c := range d.world.NICs {
			if c.Node == id {
				delete(d.world.NICs, cid)
			}
		}
		for pid, p := range d.world.Policies {
			if p.Node == id {
				delete(d.world.Policies, pid)
			}
		}
	}
	delete(d.world.Nodes, id)
	delete(d.world.NICs, id)
	delete(d.world.Policies, id)
	d.reindex()
	return d.persist()
}

// SetMarker overwrites an object's marker (simulating a foreign or tampered object).
func (d *Driver) SetMarker(id, marker string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	set := func(m *string, o *substrate.Owner) {
		*m = marker
		*o, _ = substrate.ParseMarker(marker)
	}
	switch {
	case d.world.Networks[id] != nil:
		set(&d.world.Networks[id].Marker, &d.world.Networks[id].Owner)
	case d.world.Nodes[id] != nil:
		set(&d.world.Nodes[id].Marker, &d.world.Nodes[id].Owner)
	case d.world.NICs[id] != nil:
		set(&d.world.NICs[id].Marker, &d.world.NICs[id].Owner)
	case d.world.Policies[id] != nil:
		set(&d.world.Policies[id].Marker, &d.world.Policies[id].Owner)
	default:
		return fmt.Errorf("fake: object %s: %w", id, driver.ErrNotFound)
	}
	return d.persist()
}

// SetPolicyDigest changes an installed policy's digest (simulating an edited table).
func (d *Driver) SetPolicyDigest(id, digest string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.world.Policies[id]
	if p == nil {
		return fmt.Errorf("fake: policy %s: %w", id, driver.ErrNotFound)
	}
	p.Digest = digest
	return d.persist()
}

func (d *Driver) reindex() {
	d.byNode, d.byMAC = map[string]map[string]bool{}, map[string]map[string]bool{}
	for _, c := range d.world.NICs {
		d.idxNIC(c, true)
	}
	for _, p := range d.world.Policies {
		d.idxPolicy(p, true)
	}
}

func setAdd(m map[string]map[string]bool, k, v string, add bool) {
	if add {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][v] = true
		return
	}
	delete(m[k], v)
	if len(m[k]) == 0 {
		delete(m, k)
	}
}

func (d *Driver) idxNIC(c *NIC, add bool) {
	setAdd(d.byNode, c.Node, c.ID, add)
	setAdd(d.byMAC, c.Network+"|"+c.MAC, c.ID, add)
}

func (d *Driver) idxPolicy(p *Policy, add bool) { setAdd(d.byNode, p.Node, p.ID, add) }

// children returns the NICs and policies of a node.
func (d *Driver) children(node string) (nics []*NIC, pols []*Policy) {
	for id := range d.byNode[node] {
		if c := d.world.NICs[id]; c != nil {
			nics = append(nics, c)
		}
		if p := d.world.Policies[id]; p != nil {
			pols = append(pols, p)
		}
	}
	return nics, pols
}
