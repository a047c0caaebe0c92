// Package specs holds the driver-neutral form of a resource instance: its Kind (which driver
// capabilities it is operated through) and its desired spec. Handlers produce these from
// their stored attributes; the executor consumes them and never decodes a handler's own
// structures or derives behaviour from a resource type's name.
//
// Invariants: exactly one field of Desired, the one matching the kind, is set; values may
// embed secret references (secret://…), never plaintext.
package specs

import (
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// Kind says which driver capabilities a resource is operated through.
type Kind string

const (
	KindArtifact Kind = "artifact" // Artifacts: resolve and verify, no external object
	KindNetwork  Kind = "network"  // Networks
	KindNode     Kind = "node"     // Nodes, NICs, (Resetter, GuestExec)
	KindPolicy   Kind = "policy"   // Policy, installed inside a node
)

// Desired is a resource instance's driver-neutral desired form.
type Desired struct {
	Artifact *substrate.ArtifactSpec
	// Identity is an artifact's resolved identity (digest and size the plan saw), which nodes
	// referring to the artifact carry.
	Identity *substrate.ArtifactIdentity
	Network  *substrate.NetworkSpec
	Node     *NodeSpec
	Policy   *PolicySpec
}

// Refs resolves references from one resource to another while its spec is built.
type Refs interface {
	// Artifact returns the identity of the artifact resource at ref, as planned or stored.
	Artifact(ref addrs.Instance) (*substrate.ArtifactIdentity, error)
}

// NodeSpec is a node's desired form. Spec.Owner is filled in by the executor. Spec.Artifact and
// Spec.Kernel carry the identities the planner resolved (and fingerprinted).
type NodeSpec struct {
	Spec substrate.NodeSpec `json:"spec"`
	// Environment values may embed secret references (secret://env/NAME); they are resolved
	// right before the provider call and the plaintext goes only into Spec.Environment of that
	// call.
	Environment map[string]string `json:"environment,omitempty"`
	Attachments []Attachment      `json:"attachments,omitempty"`
	Routes      []substrate.Route `json:"routes,omitempty"`
	// Provisioners run in order through guest execution once the node is up (after creation,
	// replacement or reset); arguments may embed secret references. A crash while they run
	// makes recovery run them again (at least once).
	Provisioners [][]string `json:"provisioners,omitempty"`
	// ArtifactFrom and KernelFrom name the artifact resources whose driver reference
	// (their state ExternalID, e.g. an image id) completes Spec.Artifact/Kernel at apply time.
	ArtifactFrom *addrs.Instance `json:"artifact_from,omitempty"`
	KernelFrom   *addrs.Instance `json:"kernel_from,omitempty"`
}

// Attachment is one desired attachment; its network handle is looked up in state at apply time.
type Attachment struct {
	Name    string         `json:"name"`
	Network addrs.Instance `json:"network"`
	IPv4    []string       `json:"ipv4,omitempty"`
	MAC     string         `json:"mac"`
	Gateway string         `json:"gateway,omitempty"`
	Aliases []string       `json:"aliases,omitempty"`
	MTU     int            `json:"mtu,omitempty"`
}

// PolicySpec is a policy's desired form; Spec.Owner is filled in by the executor.
type PolicySpec struct {
	Node addrs.Instance       `json:"node"`
	Spec substrate.PolicySpec `json:"spec"`
}
