package substrate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
)

// PolicySpec is IPv4 policy for one node (S9): a firewall or a router (forwarding + NAT). The
// driver resolves logical attachment names to devices at execution time and replaces one
// topology-owned table atomically.
type PolicySpec struct {
	Owner    Owner     `json:"owner"` // the policy resource's anchors
	Firewall *Firewall `json:"firewall,omitempty"`
	Router   *Router   `json:"router,omitempty"`
}

// Firewall is a stateful filter: replies to accepted traffic pass; defaults apply to new flows.
type Firewall struct {
	DefaultInput   string `json:"default_input"`   // accept | drop
	DefaultForward string `json:"default_forward"` // accept | drop
	DefaultOutput  string `json:"default_output"`  // accept | drop
	Rules          []Rule `json:"rules,omitempty"`
}

// Rule is one filter rule, in order.
type Rule struct {
	Chain           string `json:"chain"`            // input | forward | output
	Action          string `json:"action"`           // accept | drop | reject
	Protocol        string `json:"protocol"`         // tcp | udp | icmp | any
	Source          string `json:"source,omitempty"` // IPv4 CIDR
	Destination     string `json:"destination,omitempty"`
	SourcePort      int    `json:"source_port,omitempty"`
	DestinationPort int    `json:"destination_port,omitempty"`
	Attachment      string `json:"attachment,omitempty"` // logical attachment name (input/forward: incoming)
}

// Router enables forwarding and NAT.
type Router struct {
	Masquerade   []Masquerade  `json:"masquerade,omitempty"`
	PortForwards []PortForward `json:"port_forwards,omitempty"`
}

// Masquerade source-NATs traffic from Source leaving by OutAttachment.
type Masquerade struct {
	OutAttachment string `json:"out_attachment"`
	Source        string `json:"source"` // IPv4 CIDR
}

// PortForward DNATs Protocol/Port arriving on InAttachment to To ("ip:port").
type PortForward struct {
	InAttachment string `json:"in_attachment"`
	Protocol     string `json:"protocol"` // tcp | udp
	Port         int    `json:"port"`
	To           string `json:"to"`
}

// Digest is the semantic digest of the desired policy: what it means, never counters or
// handles. Refresh compares it with the digest of what the driver reads back.
func (p PolicySpec) Digest() string {
	b, _ := json.Marshal(struct {
		Firewall *Firewall `json:"firewall,omitempty"`
		Router   *Router   `json:"router,omitempty"`
	}{p.Firewall, p.Router})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}
