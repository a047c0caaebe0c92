package driver

import (
	"context"
	"errors"
	"fmt"

	"zyvor.dev/sysbox/pkg/substrate"
)

// Capability names one interface below.
type Capability string

const (
	CapArtifact       Capability = "artifact"        // Artifacts
	CapManagedNetwork Capability = "managed-network" // Networks
	CapNodeLifecycle  Capability = "node-lifecycle"  // Nodes
	CapNIC            Capability = "nic"             // NICs
	CapNodeState      Capability = "node-state"      // NodeState
	CapGuestExec      Capability = "guest-exec"      // GuestExec
	CapPolicy         Capability = "policy"          // Policy
	CapReset          Capability = "reset"           // Resetter
	CapImport         Capability = "import"          // Importer
	CapAudit          Capability = "audit"           // Auditor
)

// Descriptor says who a driver is and what it can do. Name and Version go into the stored-plan
// fingerprint together with the capability list (the capability contract).
type Descriptor struct {
	Name         string       `json:"name"`
	Version      string       `json:"version"`
	Capabilities []Capability `json:"capabilities"`
}

// Driver is anything that describes itself; capabilities are further interfaces it implements.
type Driver interface {
	Descriptor() Descriptor
}

// Artifacts resolves and verifies artifacts (S5).
type Artifacts interface {
	// ResolveArtifact computes the immutable identity (digest, size) of spec's source, loading it
	// into the driver's store if it has one. A pinned spec.Digest that differs is an error
	// wrapping ErrDigestMismatch.
	ResolveArtifact(ctx context.Context, spec substrate.ArtifactSpec) (substrate.ArtifactIdentity, error)
	// VerifyArtifact re-checks an identity before a destructive step (reset, replace).
	VerifyArtifact(ctx context.Context, id substrate.ArtifactIdentity) error
}

// Networks manages networks nodes attach to.
type Networks interface {
	CreateNetwork(ctx context.Context, spec substrate.NetworkSpec) (substrate.Handle, error)
	ObserveNetwork(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error)
	DeleteNetwork(ctx context.Context, h substrate.Handle, owner substrate.Owner) error
}

// Nodes manages a node's lifecycle. CreateNode makes the object without starting it.
type Nodes interface {
	CreateNode(ctx context.Context, spec substrate.NodeSpec) (substrate.Handle, error)
	StartNode(ctx context.Context, h substrate.Handle, spec substrate.NodeSpec) error
	ObserveNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error)
	StopNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error
	DeleteNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error
}

// ForceDeleter is the optional part of Nodes for a driver whose DeleteNode ends a running node
// itself, at once, so that a graceful StopNode right before it is wasted work. When
// DeleteStopsNode reports true, the executor removes a node generation (destroy, the first half
// of a replace, a reset's prior generation) with DeleteNode alone; DeleteNode re-checks the
// node's ownership markers as every destructive call does.
type ForceDeleter interface {
	DeleteStopsNode() bool
}

// NICRemover is the optional part of Nodes for a driver with NICs whose DeleteNode removes all
// of the node's NICs itself (what Detach would remove for each attachment, whether or not its
// attachment reached state), so that detaching them one by one first is wasted work: for
// docker, veth deletions one at a time against the kernel's batch teardown of the container's
// namespace. When DeleteRemovesNICs reports true, the executor removes a node generation
// (destroy, the first half of a replace, a reset's prior generation) without detaching its
// attachments first; a DeleteNode that fails then leaves the node wired as it was.
type NICRemover interface {
	DeleteRemovesNICs() bool
}

// Concurrency is optional: a driver that tolerates a number of its own operations in flight
// other than the executor's default says how many (at least 1). Unless the user fixed the
// parallelism, the executor's walk of a run's operations (apply, destroy, reset, recovery) runs
// up to that many of this driver's operations at once, apart from the operations of the drivers
// that do not say (see executor.Executor.Parallelism); a refresh's observations share the
// parallelism whatever the drivers say.
type Concurrency interface {
	MaxInFlight() int
}

// NICs owns the physical side of attachments (S8).
type NICs interface {
	Attach(ctx context.Context, node substrate.Handle, spec substrate.AttachmentSpec) (substrate.AttachmentState, error)
	ObserveAttachment(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) (substrate.Observation, error)
	Detach(ctx context.Context, node substrate.Handle, st substrate.AttachmentState, owner substrate.Owner) error
	// ConfigureGuestNetwork runs after wiring: addresses, default gateway and routes inside the node.
	ConfigureGuestNetwork(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, routes []substrate.Route) error
}

// HostEntry is one address and the names that resolve to it inside a node (an attachment's
// aliases, S8).
type HostEntry struct {
	Address string   `json:"address"` // IPv4 address, no prefix length
	Names   []string `json:"names"`
}

// Hosts is the optional part of the NIC capability that makes names resolve inside a node: the
// aliases of the attachments on the node's networks (its neighbours' and its own). SetHosts
// replaces the whole set; the executor calls it after wiring a node (before StartNode) and
// again whenever the set changes. A driver refuses a node whose markers are not owner's.
type Hosts interface {
	SetHosts(ctx context.Context, node substrate.Handle, owner substrate.Owner, entries []HostEntry) error
}

// NodeState is the only code that understands a driver's private envelopes (S7).
type NodeState interface {
	// CheckPrivate refuses an envelope of an unknown version or lacking the ownership evidence
	// the driver now requires, saying what to do; state loading calls it before any mutation.
	CheckPrivate(env substrate.Envelope) error
}

// GuestExec runs commands inside a node.
type GuestExec interface {
	Exec(ctx context.Context, node substrate.Handle, req substrate.ExecRequest) (substrate.ExecResult, error)
}

// Policy applies IPv4 policy as one topology-owned nftables table inside a node (S9).
type Policy interface {
	// ApplyPolicy atomically replaces the table and reads it back before returning.
	ApplyPolicy(ctx context.Context, node substrate.Handle, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Handle, error)
	// ObservePolicy compares the semantic digest of what is installed with spec's (Drifted on
	// difference; counters never count).
	ObservePolicy(ctx context.Context, node substrate.Handle, h substrate.Handle, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Observation, error)
	DeletePolicy(ctx context.Context, node substrate.Handle, h substrate.Handle, owner substrate.Owner) error
}

// Resetter replaces a node's mutable generation from its immutable baseline (S15).
type Resetter interface {
	// NewGeneration quiesces prior (its attachments stop answering so the replacement can take
	// the same IPs and MACs) and creates the replacement object for spec (whose Owner carries
	// the new generation), not started and not wired. The prior object is kept until the
	// executor deletes it after state is saved.
	NewGeneration(ctx context.Context, prior substrate.Handle, priorOwner substrate.Owner, spec substrate.NodeSpec) (substrate.Handle, error)
}

// Importer adopts an existing node (S22). How ownership of a foreign object is proven is the
// driver's documented rule.
type Importer interface {
	ImportNode(ctx context.Context, externalID string, owner substrate.Owner) (substrate.ImportedNode, error)
}

// NetworkImporter adopts an existing network object as spec.Owner's network (S22), under the
// same rule as ImportNode: an object marked for the same resource or carrying no marker at all
// is claimed (marked); one carrying another resource's marker is refused with ErrNotOwned and
// an error naming that topology and address.
type NetworkImporter interface {
	ImportNetwork(ctx context.Context, externalID string, spec substrate.NetworkSpec) (substrate.Handle, error)
}

// PolicyImporter adopts an existing policy object (a table) inside node as spec.Owner's policy
// (S22), under NetworkImporter's rule.
type PolicyImporter interface {
	ImportPolicy(ctx context.Context, node substrate.Handle, externalID string, atts []substrate.AttachmentState, spec substrate.PolicySpec) (substrate.Handle, error)
}

// Auditor lists objects that carry a topology's ownership markers (destroy's residue audit).
type Auditor interface {
	Residue(ctx context.Context, topology string) ([]substrate.Object, error)
}

// Errors callers branch on. Drivers wrap them with the object and address.
var (
	// ErrNotOwned: markers do not match state, or the evidence is incomplete. Nothing was touched.
	ErrNotOwned = errors.New("ownership not proven")
	// ErrUnavailable: the driver cannot observe or act right now (daemon down, permission).
	// Observation maps it to Unknown, never to Absent.
	ErrUnavailable = errors.New("driver unavailable")
	// ErrDigestMismatch: an artifact's content does not match its pinned or recorded digest.
	ErrDigestMismatch = errors.New("artifact digest mismatch")
	// ErrInvalid: the input (a spec, an object to import) is one this driver cannot accept.
	// The host lacking a feature is feature.ErrNotSupported instead.
	ErrInvalid = errors.New("invalid input")
	// ErrNotFound: the object does not exist.
	ErrNotFound = errors.New("not found")
)

// MissingCapabilityError says which driver lacks which capability for which resource.
type MissingCapabilityError struct {
	Address    string // resource address needing it ("" when not known)
	Driver     string
	Capability Capability
	Known      []string // registered drivers, when Driver itself is unknown
}

func (e *MissingCapabilityError) Error() string {
	prefix := ""
	if e.Address != "" {
		prefix = e.Address + ": "
	}
	if e.Known != nil {
		return fmt.Sprintf("%sdriver %q is not registered (known: %v)", prefix, e.Driver, e.Known)
	}
	return fmt.Sprintf("%sdriver %q does not implement capability %q", prefix, e.Driver, e.Capability)
}
