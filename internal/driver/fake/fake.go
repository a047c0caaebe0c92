package fake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Name is the fake driver's default registry name.
const Name = "fake"

// EnvFailpoints names the environment variable New reads failpoints from (see ParseFailpoints).
const EnvFailpoints = "SYSBOX_FAKE_FAILPOINTS"

const (
	worldKind    = "sysbox-fake-world"
	worldVersion = 1
	envVersion   = 1
)

// Object kinds as reported by Residue.
const (
	KindNetwork = "fake-network"
	KindNode    = "fake-node"
	KindNIC     = "fake-nic"
	KindPolicy  = "fake-policy"
)

// World is everything the fake holds. Tests may read it through Driver.World.
type World struct {
	Networks map[string]*Network `json:"networks"`
	Nodes    map[string]*Node    `json:"nodes"`
	NICs     map[string]*NIC     `json:"nics"`
	Policies map[string]*Policy  `json:"policies"`
	// Artifacts maps an artifact source to its content; a source not listed has content equal
	// to its own name.
	Artifacts map[string]string `json:"artifacts,omitempty"`
	// Mutations counts successful mutating calls over the world's life.
	Mutations uint64 `json:"mutations"`
}

// Network is a managed network object.
type Network struct {
	ID     string          `json:"id"`
	Marker string          `json:"marker"` // Owner.Marker(), "" for a foreign object
	Owner  substrate.Owner `json:"owner"`
	CIDR   string          `json:"cidr"`
}

// Node is a node object.
type Node struct {
	ID       string            `json:"id"`
	Marker   string            `json:"marker"`
	Owner    substrate.Owner   `json:"owner"`
	Running  bool              `json:"running"`
	Quiesced bool              `json:"quiesced,omitempty"` // a prior generation during reset
	Digest   string            `json:"digest,omitempty"`   // artifact digest it was created from
	Command  []string          `json:"command,omitempty"`
	EnvKeys  []string          `json:"env_keys,omitempty"` // names only, never values
	Routes   []substrate.Route `json:"routes,omitempty"`
	Foreign  bool              `json:"foreign,omitempty"` // created by AddForeignNode, not by sysbox
}

// NIC is the physical side of one attachment.
type NIC struct {
	ID      string          `json:"id"`
	Marker  string          `json:"marker"`
	Owner   substrate.Owner `json:"owner"`
	Node    string          `json:"node"`
	Name    string          `json:"name"`
	Network string          `json:"network"`
	MAC     string          `json:"mac"`
	IPv4    []string        `json:"ipv4,omitempty"`
	Up      bool            `json:"up"`
}

// Policy is an installed policy table.
type Policy struct {
	ID     string          `json:"id"`
	Marker string          `json:"marker"`
	Owner  substrate.Owner `json:"owner"`
	Node   string          `json:"node"`
	Digest string          `json:"digest"`
}

// Driver is the fake. Its zero value is not usable; call New.
type Driver struct {
	mu    sync.Mutex
	name  string
	path  string
	world World
	fps   []*Failpoint
	hits  map[string]int
	calls []string

	unavailable bool
	lastEnv     map[string]map[string]string // node id -> environment seen at create (memory only)

	// Indexes (memory only, rebuilt on load) keep per-call work independent of world size.
	byNode map[string]map[string]bool // node id -> ids of its NICs and policies
	byMAC  map[string]map[string]bool // network id + "|" + MAC -> NIC ids
}

var (
	_ driver.Driver    = (*Driver)(nil)
	_ driver.Artifacts = (*Driver)(nil)
	_ driver.Networks  = (*Driver)(nil)
	_ driver.Nodes     = (*Driver)(nil)
	_ driver.NICs      = (*Driver)(nil)
	_ driver.NodeState = (*Driver)(nil)
	_ driver.GuestExec = (*Driver)(nil)
	_ driver.Policy    = (*Driver)(nil)
	_ driver.Resetter  = (*Driver)(nil)
	_ driver.Importer  = (*Driver)(nil)
	_ driver.Auditor   = (*Driver)(nil)
)

// Options configure New.
type Options struct {
	Name string // registry name; "" means "fake"
	// Path, when set, persists the world there (read at New, rewritten after every mutation).
	Path string
	// Failpoints in the SYSBOX_FAKE_FAILPOINTS syntax; New also appends that variable's value.
	Failpoints string
}

// New returns a fake driver, loading the world from opts.Path if it exists.
func New(opts Options) (*Driver, error) {
	d := &Driver{name: opts.Name, path: opts.Path, hits: map[string]int{}, lastEnv: map[string]map[string]string{}}
	if d.name == "" {
		d.name = Name
	}
	d.world = World{Networks: map[string]*Network{}, Nodes: map[string]*Node{}, NICs: map[string]*NIC{}, Policies: map[string]*Policy{}}
	if d.path != "" {
		b, err := os.ReadFile(d.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("fake driver: %w", err)
		default:
			if _, err := durable.DecodeRecord(b, worldKind, worldVersion, &d.world); err != nil {
				return nil, fmt.Errorf("fake driver: world %s: %w", d.path, err)
			}
			d.world.fill()
		}
	}
	d.reindex()
	for _, spec := range []string{opts.Failpoints, os.Getenv(EnvFailpoints)} {
		fps, err := ParseFailpoints(spec)
		if err != nil {
			return nil, fmt.Errorf("fake driver: %w", err)
		}
		d.fps = append(d.fps, fps...)
	}
	return d, nil
}

func (w *World) fill() {
	if w.Networks == nil {
		w.Networks = map[string]*Network{}
	}
	if w.Nodes == nil {
		w.Nodes = map[string]*Node{}
	}
	if w.NICs == nil {
		w.NICs = map[string]*NIC{}
	}
	if w.Policies == nil {
		w.Policies = map[string]*Policy{}
	}
}

// Register registers a fake driver persisted at path ("" for memory only) under the name "fake".
func Register(r *driver.Registry, path string) (*Driver, error) {
	d, err := New(Options{Path: path})
	if err != nil {
		return nil, err
	}
	return d, r.Register(d)
}

// Descriptor declares every capability.
func (d *Driver) Descriptor() driver.Descriptor {
	return driver.Descriptor{Name: d.name, Version: "1", Capabilities: []driver.Capability{
		driver.CapArtifact, driver.CapManagedNetwork, driver.CapNodeLifecycle, driver.CapNIC,
		driver.CapNodeState, driver.CapGuestExec, driver.CapPolicy, driver.CapReset,
		driver.CapImport, driver.CapAudit,
	}}
}

// ---- failpoints ----

// FailAction is what a failpoint does.
type FailAction string

const (
	FailError       FailAction = "error"       // return an error, mutate nothing
	FailUnavailable FailAction = "unavailable" // return an error wrapping driver.ErrUnavailable
	FailCrash       FailAction = "crash"       // SIGKILL this process
)

// Failpoint fires at Point ("CreateNode" before the mutation, "CreateNode.after" after it is
// persisted, or "mutation" after every persisted mutation), on the Nth hit (0 = every hit).
type Failpoint struct {
	Point  string
	Nth    int
	Action FailAction
}

// ErrInjected is wrapped by errors a failpoint returns.
var ErrInjected = errors.New("injected failure")

// ParseFailpoints parses "Point[@N]=action,…", e.g. "CreateNode.after@2=crash,Attach=error".
func ParseFailpoints(s string) ([]*Failpoint, error) {
	var out []*Failpoint
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lhs, act, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want POINT[@N]=error|unavailable|crash", part)
		}
		fp := &Failpoint{Point: lhs, Action: FailAction(act)}
		if p, n, ok := strings.Cut(lhs, "@"); ok {
			nth, err := strconv.Atoi(n)
			if err != nil || nth < 1 {
				return nil, fmt.Errorf("failpoint %q: bad hit number %q", part, n)
			}
			fp.Point, fp.Nth = p, nth
		}
		switch fp.Action {
		case FailError, FailUnavailable, FailCrash:
		default:
			return nil, fmt.Errorf("failpoint %q: unknown action %q", part, act)
		}
		out = append(out, fp)
	}
	return out, nil
}

// SetFailpoint adds a failpoint.
func (d *Driver) SetFailpoint(point string, nth int, action FailAction) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fps = append(d.fps, &Failpoint{Point: point, Nth: nth, Action: action})
}

// ClearFailpoints removes every failpoint.
func (d *Driver) ClearFailpoints() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fps = nil
}

// SetUnavailable makes every call fail with driver.ErrUnavailable (observations return Unknown).
func (d *Driver) SetUnavailable(v bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unavailable = v
}

// hit is called with d.mu held.
func (d *Driver) hit(point string) error {
	d.hits[point]++
	n := d.hits[point]
	for _, fp := range d.fps {
		if fp.Point != point || (fp.Nth != 0 && fp.Nth != n) {
			continue
		}
		switch fp.Action {
		case FailCrash:
			crash()
		case FailUnavailable:
			return fmt.Errorf("fake %s: %w (failpoint)", point, driver.ErrUnavailable)
		default:
			return fmt.Errorf("fake %s: %w", point, ErrInjected)
		}
	}
	return nil
}

func crash() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is delivered asynchronously; never return into the caller
}

// enter records a call, refuses a cancelled context and runs the before-failpoint. Called
// with d.mu held.
func (d *Driver) enter(ctx context.Context, method string) error {
	d.calls = append(d.calls, method)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake %s: %w", method, err)
	}
	if d.unavailable {
		return fmt.Errorf("fake %s: %w", method, driver.ErrUnavailable)
	}
	return d.hit(method)
}

// commit persists a mutation and runs the after-failpoints. Called with d.mu held.
func (d *Driver) commit(method string) error {
	d.world.Mutations++
	if err := d.persist(); err != nil {
		return fmt.Errorf("fake %s: %w", method, err)
	}
	if err := d.hit("mutation"); err != nil {
		return err
	}
	return d.hit(method + ".after")
}

func (d *Driver) persist() error {
	if d.path == "" {
		return nil
	}
	b, err := durable.EncodeRecord(worldKind, worldVersion, &d.world)
	if err != nil {
		return err
	}
	return durable.WriteFile(d.path, b, 0o600)
}

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

// ---- ids, envelopes, ownership ----

func objectID(prefix string, o substrate.Owner, extra string) string {
	return fmt.Sprintf("%s-%s-g%d%s", prefix, o.ShortID(10), o.Generation, extra)
}

type private struct {
	ID     string `json:"id"`
	Marker string `json:"marker"`
}

func (d *Driver) envelope(id, marker string) substrate.Envelope {
	b, _ := json.Marshal(private{ID: id, Marker: marker})
	return substrate.Envelope{Driver: d.name, Version: envVersion, Data: b}
}

func (d *Driver) handle(id, marker string) substrate.Handle {
	return substrate.Handle{Driver: d.name, ExternalID: id, Private: d.envelope(id, marker)}
}

// CheckPrivate accepts only this driver's envelope version carrying a complete marker.
func (d *Driver) CheckPrivate(env substrate.Envelope) error {
	if env.Driver != d.name {
		return fmt.Errorf("fake envelope: written by driver %q, not %q", env.Driver, d.name)
	}
	if env.Version != envVersion {
		return fmt.Errorf("fake envelope: version %d unknown (this build reads %d); destroy with the binary that created it", env.Version, envVersion)
	}
	var p private
	if err := json.Unmarshal(env.Data, &p); err != nil {
		return fmt.Errorf("fake envelope: %w", err)
	}
	o, err := substrate.ParseMarker(p.Marker)
	if err != nil || !o.Complete() {
		return fmt.Errorf("fake envelope %s: lacks ownership marker required by this version; destroy with the binary that created it and recreate", p.ID)
	}
	return nil
}

// owned checks that an object's marker proves want. Called with d.mu held.
func owned(kind, id, marker string, want substrate.Owner) error {
	if !want.Complete() {
		return fmt.Errorf("fake %s %s: %w: caller's ownership evidence incomplete (%+v)", kind, id, driver.ErrNotOwned, want)
	}
	got, err := substrate.ParseMarker(marker)
	if err != nil {
		return fmt.Errorf("fake %s %s: %w: no sysbox marker", kind, id, driver.ErrNotOwned)
	}
	if !got.Equal(want) {
		return fmt.Errorf("fake %s %s: %w: marker says %s gen %d of %s, state says %s gen %d of %s", kind, id, driver.ErrNotOwned,
			got.Address, got.Generation, got.Topology, want.Address, want.Generation, want.Topology)
	}
	return nil
}

func present(id string, o substrate.Owner, attrs map[string]string) substrate.Observation {
	return substrate.Observation{Status: substrate.Present, ExternalID: id, Owner: &o, Attributes: attrs, At: time.Now().UTC()}
}

func absent(id string) substrate.Observation {
	return substrate.Observation{Status: substrate.Absent, ExternalID: id, At: time.Now().UTC()}
}

func unknown(id string, err error) (substrate.Observation, error) {
	return substrate.Observation{Status: substrate.Unknown, ExternalID: id, Reason: err.Error(), At: time.Now().UTC()}, err
}

// observeMarker turns a found object into an observation, comparing markers.
func observeMarker(id, marker string, want substrate.Owner) substrate.Observation {
	got, err := substrate.ParseMarker(marker)
	if err != nil || !got.Equal(want) {
		return substrate.Observation{Status: substrate.Drifted, ExternalID: id, Reason: "ownership marker differs from state", At: time.Now().UTC()}
	}
	return present(id, got, nil)
}

// ---- Artifacts ----

func (d *Driver) digestOf(source string) (string, int64) {
	content, ok := d.world.Artifacts[source]
	if !ok {
		content = source
	}
	sum := sha256.Sum256([]byte(content))
	return "sha256:" + hex.EncodeToString(sum[:]), int64(len(content))
}

// ResolveArtifact digests the artifact's content.
func (d *Driver) ResolveArtifact(ctx context.Context, spec substrate.ArtifactSpec) (substrate.ArtifactIdentity, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ResolveArtifact"); err != nil {
		return substrate.ArtifactIdentity{}, err
	}
	dg, size := d.digestOf(spec.Source)
	if spec.Digest != "" && spec.Digest != dg {
		return substrate.ArtifactIdentity{}, fmt.Errorf("fake artifact %s: %w: pinned %s, content %s", spec.Source, driver.ErrDigestMismatch, spec.Digest, dg)
	}
	return substrate.ArtifactIdentity{Kind: spec.Kind, Source: spec.Source, Architecture: spec.Architecture,
		GuestFamily: spec.GuestFamily, Size: size, Digest: dg, Ref: "fake-artifact-" + dg[7:19]}, nil
}

// VerifyArtifact re-digests the content.
func (d *Driver) VerifyArtifact(ctx context.Context, id substrate.ArtifactIdentity) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "VerifyArtifact"); err != nil {
		return err
	}
	if dg, _ := d.digestOf(id.Source); dg != id.Digest {
		return fmt.Errorf("fake artifact %s: %w: recorded %s, content now %s", id.Source, driver.ErrDigestMismatch, id.Digest, dg)
	}
	return nil
}

// ---- Networks ----

// CreateNetwork creates (or, for the same owner, returns) a network.
func (d *Driver) CreateNetwork(ctx context.Context, spec substrate.NetworkSpec) (substrate.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "CreateNetwork"); err != nil {
		return substrate.Handle{}, err
	}
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("fake network: incomplete owner %+v", spec.Owner)
	}
	id := objectID("net", spec.Owner, "")
	m := spec.Owner.Marker()
	if n := d.world.Networks[id]; n != nil {
		if n.Marker != m {
			return substrate.Handle{}, fmt.Errorf("fake network %s: exists with another owner: %w", id, driver.ErrNotOwned)
		}
		return d.handle(id, m), nil
	}
	d.world.Networks[id] = &Network{ID: id, Marker: m, Owner: spec.Owner, CIDR: spec.IPv4CIDR}
	return d.handle(id, m), d.commit("CreateNetwork")
}

// ObserveNetwork reports the network's status.
func (d *Driver) ObserveNetwork(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ObserveNetwork"); err != nil {
		return unknown(h.ExternalID, err)
	}
	n := d.world.Networks[h.ExternalID]
	if n == nil {
		return absent(h.ExternalID), nil
	}
	return observeMarker(n.ID, n.Marker, owner), nil
}

// DeleteNetwork deletes the network after checking its marker; NICs still on it are refused.
func (d *Driver) DeleteNetwork(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "DeleteNetwork"); err != nil {
		return err
	}
	n := d.world.Networks[h.ExternalID]
	if n == nil {
		return fmt.Errorf("fake network %s: %w", h.ExternalID, driver.ErrNotFound)
	}
	if err := owned("network", n.ID, n.Marker, owner); err != nil {
		return err
	}
	for _, c := range d.world.NICs {
		if c.Network == n.ID {
			return fmt.Errorf("fake network %s: still has nic %s of node %s attached", n.ID, c.ID, c.Node)
		}
	}
	delete(d.world.Networks, n.ID)
	return d.commit("DeleteNetwork")
}

// ---- Nodes ----

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

// ---- NICs ----

func nicID(node, name string) string { return node + "/" + name }

type nicPrivate struct {
	ID string `json:"id"`
}

func (d *Driver) nicOf(st substrate.AttachmentState) string {
	var p nicPrivate
	_ = json.Unmarshal(st.Private.Data, &p)
	return p.ID
}

// Attach wires the node to a network (idempotent for the same owner and name).
func (d *Driver) Attach(ctx context.Context, node substrate.Handle, spec substrate.AttachmentSpec) (substrate.AttachmentState, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "Attach"); err != nil {
		return substrate.AttachmentState{}, err
	}
	n := d.world.Nodes[node.ExternalID]
	if n == nil {
		return substrate.AttachmentState{}, fmt.Errorf("fake attach %s: node %s: %w", spec.Name, node.ExternalID, driver.ErrNotFound)
	}
	if err := owned("node", n.ID, n.Marker, spec.Owner); err != nil {
		return substrate.AttachmentState{}, err
	}
	if d.world.Networks[spec.Network.ExternalID] == nil {
		return substrate.AttachmentState{}, fmt.Errorf("fake attach %s: network %s: %w", spec.Name, spec.Network.ExternalID, driver.ErrNotFound)
	}
	// The same MAC may not be live twice on one network (a prior generation must be quiesced).
	for cid := range d.byMAC[spec.Network.ExternalID+"|"+spec.MAC] {
		if c := d.world.NICs[cid]; c != nil && c.Up && c.Node != n.ID {
			return substrate.AttachmentState{}, fmt.Errorf("fake attach %s: mac %s already live on network %s (nic %s)", spec.Name, spec.MAC, c.Network, c.ID)
		}
	}
	id := nicID(n.ID, spec.Name)
	pb, _ := json.Marshal(nicPrivate{ID: id})
	st := substrate.AttachmentState{Name: spec.Name, MAC: spec.MAC, IPv4: spec.IPv4, Gateway: spec.Gateway,
		Private: substrate.Envelope{Driver: d.name, Version: envVersion, Data: pb}}
	m := spec.Owner.Marker()
	if c := d.world.NICs[id]; c != nil && c.Marker == m {
		return st, nil
	}
	if old := d.world.NICs[id]; old != nil {
		d.idxNIC(old, false)
	}
	d.world.NICs[id] = &NIC{ID: id, Marker: m, Owner: spec.Owner, Node: n.ID, Name: spec.Name,
		Network: spec.Network.ExternalID, MAC: spec.MAC, IPv4: spec.IPv4, Up: !n.Quiesced}
	d.idxNIC(d.world.NICs[id], true)
	return st, d.commit("Attach")
}

// ObserveAttachment reports the NIC's status.
func (d *Driver) ObserveAttachment(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) (substrate.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	id := d.nicOf(st)
	if err := d.enter(ctx, "ObserveAttachment"); err != nil {
		return unknown(id, err)
	}
	c := d.world.NICs[id]
	if c == nil {
		return absent(id), nil
	}
	obs := observeMarker(id, c.Marker, owner)
	if obs.Status == substrate.Present && (!c.Up || c.MAC != st.MAC) {
		obs.Status, obs.Reason = substrate.Drifted, "nic down or mac changed"
	}
	return obs, nil
}

// Detach removes the NIC after checking its marker.
func (d *Driver) Detach(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "Detach"); err != nil {
		return err
	}
	id := d.nicOf(st)
	c := d.world.NICs[id]
	if c == nil {
		return fmt.Errorf("fake nic %s: %w", id, driver.ErrNotFound)
	}
	if err := owned("nic", id, c.Marker, owner); err != nil {
		return err
	}
	d.idxNIC(c, false)
	delete(d.world.NICs, id)
	return d.commit("Detach")
}

// ConfigureGuestNetwork records the routes inside the node.
func (d *Driver) ConfigureGuestNetwork(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, routes []substrate.Route) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ConfigureGuestNetwork"); err != nil {
		return err
	}
	n := d.world.Nodes[node.ExternalID]
	if n == nil {
		return fmt.Errorf("fake node %s: %w", node.ExternalID, driver.ErrNotFound)
	}
	for _, a := range atts {
		if d.world.NICs[d.nicOf(a)] == nil {
			return fmt.Errorf("fake node %s: configure %s: nic %w", n.ID, a.Name, driver.ErrNotFound)
		}
	}
	n.Routes = append([]substrate.Route(nil), routes...)
	return d.commit("ConfigureGuestNetwork")
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

// ---- Policy ----

// ApplyPolicy installs (replacing atomically) the node's policy table and reads it back.
func (d *Driver) ApplyPolicy(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Handle, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ApplyPolicy"); err != nil {
		return substrate.Handle{}, err
	}
	n := d.world.Nodes[node.ExternalID]
	if n == nil {
		return substrate.Handle{}, fmt.Errorf("fake policy: node %s: %w", node.ExternalID, driver.ErrNotFound)
	}
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("fake policy: incomplete owner %+v", spec.Owner)
	}
	names := map[string]bool{}
	for _, a := range atts {
		names[a.Name] = true
	}
	for _, ref := range policyAttachments(spec) {
		if !names[ref] {
			return substrate.Handle{}, fmt.Errorf("fake policy %s: attachment %q not wired on node %s", spec.Owner.Address, ref, n.ID)
		}
	}
	id := policyID(n.ID, spec.Owner)
	m := spec.Owner.Marker()
	if p := d.world.Policies[id]; p != nil && p.Marker != m {
		if err := owned("policy", id, p.Marker, spec.Owner); err != nil {
			return substrate.Handle{}, err
		}
	}
	d.world.Policies[id] = &Policy{ID: id, Marker: m, Owner: spec.Owner, Node: n.ID, Digest: spec.Digest()}
	d.idxPolicy(d.world.Policies[id], true)
	if err := d.commit("ApplyPolicy"); err != nil {
		return substrate.Handle{}, err
	}
	if d.world.Policies[id].Digest != spec.Digest() { // readback
		return substrate.Handle{}, fmt.Errorf("fake policy %s: readback differs", id)
	}
	return d.handle(id, m), nil
}

func policyID(node string, o substrate.Owner) string { return "pol-" + node + "-" + o.ShortID(8) }

func policyAttachments(spec substrate.PolicySpec) []string {
	var out []string
	if spec.Firewall != nil {
		for _, r := range spec.Firewall.Rules {
			if r.Attachment != "" {
				out = append(out, r.Attachment)
			}
		}
	}
	if spec.Router != nil {
		for _, m := range spec.Router.Masquerade {
			out = append(out, m.OutAttachment)
		}
		for _, p := range spec.Router.PortForwards {
			out = append(out, p.InAttachment)
		}
	}
	return out
}

// ObservePolicy compares the installed digest with spec's.
func (d *Driver) ObservePolicy(ctx context.Context, node substrate.Handle, h substrate.Handle, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "ObservePolicy"); err != nil {
		return unknown(h.ExternalID, err)
	}
	p := d.world.Policies[h.ExternalID]
	if p == nil || p.Node != node.ExternalID {
		return absent(h.ExternalID), nil
	}
	obs := observeMarker(p.ID, p.Marker, spec.Owner)
	if obs.Status == substrate.Present && p.Digest != spec.Digest() {
		obs.Status, obs.Reason = substrate.Drifted, "installed policy digest "+p.Digest+" differs from "+spec.Digest()
	}
	obs.Attributes = map[string]string{"digest": p.Digest}
	return obs, nil
}

// DeletePolicy removes the table after checking its marker.
func (d *Driver) DeletePolicy(ctx context.Context, node substrate.Handle, h substrate.Handle, owner substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "DeletePolicy"); err != nil {
		return err
	}
	p := d.world.Policies[h.ExternalID]
	if p == nil {
		return fmt.Errorf("fake policy %s: %w", h.ExternalID, driver.ErrNotFound)
	}
	if err := owned("policy", p.ID, p.Marker, owner); err != nil {
		return err
	}
	d.idxPolicy(p, false)
	delete(d.world.Policies, p.ID)
	return d.commit("DeletePolicy")
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

// ---- Auditor ----

// Residue lists every object carrying topology's markers, sorted by kind and id.
func (d *Driver) Residue(ctx context.Context, topology string) ([]substrate.Object, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.enter(ctx, "Residue"); err != nil {
		return nil, err
	}
	var out []substrate.Object
	add := func(kind, id, marker string) {
		if o, err := substrate.ParseMarker(marker); err == nil && o.Topology == topology {
			out = append(out, substrate.Object{Kind: kind, ExternalID: id, Owner: o})
		}
	}
	for _, n := range d.world.Networks {
		add(KindNetwork, n.ID, n.Marker)
	}
	for _, n := range d.world.Nodes {
		add(KindNode, n.ID, n.Marker)
	}
	for _, c := range d.world.NICs {
		add(KindNIC, c.ID, c.Marker)
	}
	for _, p := range d.world.Policies {
		add(KindPolicy, p.ID, p.Marker)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].ExternalID < out[j].ExternalID
	})
	return out, nil
}

// Alias is the fake registered under another name, sharing the fake's world, so that tests and
// the CLI's test mode can stand in for "netns", "nftables" or "docker" (whose names the
// configuration language accepts).
type Alias struct {
	*Driver
	name string
}

// As returns d under another registry name.
func (d *Driver) As(name string) *Alias { return &Alias{Driver: d, name: name} }

// Descriptor renames the fake's descriptor.
func (a *Alias) Descriptor() driver.Descriptor {
	desc := a.Driver.Descriptor()
	desc.Name = a.name
	return desc
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
