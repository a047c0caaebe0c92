package substrate

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Owner anchors an external object to the topology resource that created it (S16). Drivers
// write it onto every object they create (link alias, table comment, container label, ...) and
// compare it before any destructive step.
type Owner struct {
	Topology   string `json:"topology"`   // the topology's state lineage (a UUID)
	Address    string `json:"address"`    // canonical resource address
	Type       string `json:"type"`       // resource type, e.g. "sysbox_node"
	Generation uint64 `json:"generation"` // bumped by reset; 1 for the first generation
}

// Complete reports whether every anchor is present; incomplete evidence never proves ownership.
func (o Owner) Complete() bool {
	return o.Topology != "" && o.Address != "" && o.Type != "" && o.Generation > 0
}

// Equal compares all anchors.
func (o Owner) Equal(p Owner) bool { return o == p }

// SameResource compares all anchors but the generation.
func (o Owner) SameResource(p Owner) bool {
	return o.Topology == p.Topology && o.Address == p.Address && o.Type == p.Type
}

const markerPrefix = "sysbox1:"

// Marker encodes the owner compactly for places that hold a short string (a link alias holds
// 255 bytes). ParseMarker reverses it.
func (o Owner) Marker() string {
	b, _ := json.Marshal([]any{o.Topology, o.Address, o.Type, o.Generation})
	return markerPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// ErrNoMarker is returned by ParseMarker for a string that is not a sysbox ownership marker.
var ErrNoMarker = errors.New("not a sysbox ownership marker")

// ParseMarker decodes a Marker string.
func ParseMarker(s string) (Owner, error) {
	if !strings.HasPrefix(s, markerPrefix) {
		return Owner{}, ErrNoMarker
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, markerPrefix))
	if err != nil {
		return Owner{}, fmt.Errorf("ownership marker: %w", err)
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil || len(parts) != 4 {
		return Owner{}, fmt.Errorf("ownership marker: malformed")
	}
	var o Owner
	if json.Unmarshal(parts[0], &o.Topology) != nil || json.Unmarshal(parts[1], &o.Address) != nil ||
		json.Unmarshal(parts[2], &o.Type) != nil || json.Unmarshal(parts[3], &o.Generation) != nil {
		return Owner{}, fmt.Errorf("ownership marker: malformed")
	}
	return o, nil
}

// ShortID is a short, stable identifier derived from the owner (without generation) for
// length-limited names such as 15-byte interface names. Names are never proof of ownership;
// markers are.
func (o Owner) ShortID(n int) string {
	sum := sha256.Sum256([]byte(o.Topology + "\x00" + o.Address + "\x00" + o.Type))
	h := hex.EncodeToString(sum[:])
	if n > len(h) {
		n = len(h)
	}
	return h[:n]
}

// Status is the result of observing an external object (S12).
type Status string

const (
	Present  Status = "present"  // exists and matches what is known
	Absent   Status = "absent"   // certainly does not exist
	Drifted  Status = "drifted"  // exists but departs from the declaration or state
	Degraded Status = "degraded" // observable but not fully functional (e.g. an attachment missing)
	Unknown  Status = "unknown"  // cannot be observed reliably; never treated as absent
)

// Observation is what a driver saw.
type Observation struct {
	Status     Status            `json:"status"`
	Reason     string            `json:"reason,omitempty"`
	ExternalID string            `json:"external_id,omitempty"`
	Owner      *Owner            `json:"owner,omitempty"`      // markers found on the object, if any
	Attributes map[string]string `json:"attributes,omitempty"` // observed public facts, e.g. "pid"
	At         time.Time         `json:"at"`
}

// Envelope is provider-private state: versioned, opaque to the runtime (S7).
type Envelope struct {
	Driver  string          `json:"driver"`
	Version int             `json:"version"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// EnvelopeSummary describes an envelope without its content: what views (`state show`, the
// UI) show in its place, so provider-private data never reaches them.
type EnvelopeSummary struct {
	Driver  string `json:"driver"`
	Version int    `json:"version"`
	Bytes   int    `json:"bytes"`
}

// Summary reduces e to its driver, version and size.
func (e Envelope) Summary() EnvelopeSummary {
	return EnvelopeSummary{Driver: e.Driver, Version: e.Version, Bytes: len(e.Data)}
}

// Handle identifies an external object a driver created.
type Handle struct {
	Driver     string   `json:"driver"`
	ExternalID string   `json:"external_id"` // container id, namespace name, bridge name, table name ...
	Private    Envelope `json:"private"`
}

// IsZero reports whether h names nothing.
func (h Handle) IsZero() bool { return h.Driver == "" && h.ExternalID == "" }

// ArtifactSpec is an artifact as declared (S5). Source is resolved against BaseDir.
type ArtifactSpec struct {
	Owner        Owner  `json:"owner"`
	Kind         string `json:"kind"` // oci_image | rootfs | qcow2 | kernel
	Source       string `json:"source"`
	BaseDir      string `json:"base_dir,omitempty"`
	Architecture string `json:"architecture,omitempty"`
	GuestFamily  string `json:"guest_family,omitempty"`
	Digest       string `json:"digest,omitempty"` // optional pin "sha256:…"
}

// ArtifactIdentity is an artifact's immutable identity (S5).
type ArtifactIdentity struct {
	Kind         string `json:"kind"`
	Source       string `json:"source"`
	Architecture string `json:"architecture,omitempty"`
	GuestFamily  string `json:"guest_family,omitempty"`
	Size         int64  `json:"size,omitempty"`
	Digest       string `json:"digest"` // "sha256:…"
	// Ref is how the driver refers to the loaded artifact (e.g. a Docker image id); public.
	Ref string `json:"ref,omitempty"`
}

// NetworkSpec is a managed network (a Linux bridge for the built-in driver).
type NetworkSpec struct {
	Owner    Owner  `json:"owner"`
	IPv4CIDR string `json:"ipv4_cidr"`
	MTU      int    `json:"mtu,omitempty"`
}

// NetworkHandleKindBridge marks a network whose Handle.ExternalID is a Linux bridge interface
// name in the host namespace, which any node driver's NIC capability may attach to.
const NetworkHandleKindBridge = "linux-bridge"

// NodeSpec is a node to create.
type NodeSpec struct {
	Owner    Owner             `json:"owner"`
	Driver   string            `json:"driver"`
	Artifact *ArtifactIdentity `json:"artifact,omitempty"`
	Kernel   *ArtifactIdentity `json:"kernel,omitempty"`
	CPUs     int               `json:"cpus,omitempty"`
	MemoryMB int               `json:"memory_mb,omitempty"`
	Command  []string          `json:"command,omitempty"`
	Hostname string            `json:"hostname,omitempty"`
	// Environment holds plaintext resolved for this call only. It is tagged `json:"-"` so that
	// it cannot be persisted by accident; drivers must not log or store it.
	Environment map[string]string `json:"-"`
}

// Route is a static IPv4 route inside a node.
type Route struct {
	To  string `json:"to"`  // CIDR, "0.0.0.0/0" for default
	Via string `json:"via"` // next hop
}

// AttachmentSpec wires a node to a network (S8). Identity = (Node, Name).
type AttachmentSpec struct {
	Owner   Owner    `json:"owner"` // the node's owner anchors
	Node    string   `json:"node"`  // canonical address of the node
	Name    string   `json:"name"`  // logical attachment name
	Network Handle   `json:"network"`
	IPv4    []string `json:"ipv4,omitempty"` // prefixes, "198.51.100.10/24"
	MAC     string   `json:"mac"`
	Gateway string   `json:"gateway,omitempty"`
	Aliases []string `json:"aliases,omitempty"`
	MTU     int      `json:"mtu,omitempty"`
}

// AttachmentState is a wired attachment: public facts plus the NIC capability's private state
// (device names, indexes), which the runtime stores but never reads.
type AttachmentState struct {
	Name    string   `json:"name"`
	MAC     string   `json:"mac"`
	IPv4    []string `json:"ipv4,omitempty"`
	Gateway string   `json:"gateway,omitempty"`
	Private Envelope `json:"private"`
}

// ExecRequest runs a command inside a node (guest execution).
type ExecRequest struct {
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"-"` // resolved plaintext, never persisted
	Stdin   []byte            `json:"-"`
	Timeout time.Duration     `json:"timeout,omitempty"`
}

// ExecResult is what a guest command left.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   []byte `json:"stdout"`
	Stderr   []byte `json:"stderr"`
}

// Object is an external object a driver found carrying a topology's markers (residue audit).
type Object struct {
	Kind       string `json:"kind"` // "netns", "bridge", "veth", "nft-table", "container", ...
	ExternalID string `json:"external_id"`
	Owner      Owner  `json:"owner"`
}

// ImportedNode is what an import found, normalized by the driver.
type ImportedNode struct {
	Handle      Handle            `json:"handle"`
	Artifact    *ArtifactIdentity `json:"artifact,omitempty"`
	Command     []string          `json:"command,omitempty"`
	Attachments []AttachmentState `json:"attachments,omitempty"`
	// VM drivers also report what NodeSpec carries for a VM (zero: not applicable).
	Kernel   *ArtifactIdentity `json:"kernel,omitempty"`
	CPUs     int               `json:"cpus,omitempty"`
	MemoryMB int               `json:"memory_mb,omitempty"`
}

// Seal wraps a driver's private value v as an envelope of that driver and version.
func Seal(driver string, version int, v any) Envelope {
	data, _ := json.Marshal(v) // the drivers' private values are plain structs
	return Envelope{Driver: driver, Version: version, Data: data}
}

// Open decodes e into v when e belongs to driver and its version is 1..maxVersion; a newer
// version says to upgrade sysbox.
func (e Envelope) Open(driver string, maxVersion int, v any) error {
	if e.Driver != driver {
		return fmt.Errorf("envelope belongs to driver %q, not %q", e.Driver, driver)
	}
	if e.Version < 1 || e.Version > maxVersion {
		return fmt.Errorf("envelope version %d: driver %s knows versions 1..%d; upgrade sysbox", e.Version, driver, maxVersion)
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("envelope data: %w", err)
	}
	return nil
}
