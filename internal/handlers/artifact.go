package handlers

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
)

// ArtifactConfig is the stored form of sysbox_artifact (S5).
type ArtifactConfig struct {
	Driver       string `json:"driver"`
	Kind         string `json:"kind"`
	Source       string `json:"source"`
	BaseDir      string `json:"base_dir,omitempty"`
	Architecture string `json:"architecture"`
	GuestFamily  string `json:"guest_family"`
	// Pinned is the digest the configuration requires ("" when not pinned).
	Pinned string `json:"pinned_digest,omitempty"`
	// Digest and Size are plan-time facts (computed from the source by the caller).
	Digest string `json:"digest,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

// ArtifactKinds are the artifact kinds sysbox knows.
var ArtifactKinds = []string{"oci_image", "rootfs", "qcow2", "kernel"}

// DefaultArtifactDriver resolves (loads and verifies) artifacts unless the resource names another
// driver: docker is the driver that implements the artifact capability today.
const DefaultArtifactDriver = "docker"

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Artifact handles sysbox_artifact (resource and data source).
type Artifact struct{}

func (*Artifact) Type() string        { return "sysbox_artifact" }
func (*Artifact) Modes() (bool, bool) { return true, true }
func (*Artifact) SchemaVersion() int  { return 1 }
func (*Artifact) DependencyChanged(*config.ResourceInstance, addrs.Instance, plans.Action) (plans.Action, string) {
	return plans.NoOp, ""
}

// Spec implements config.Schema.
func (*Artifact) Spec() hcldec.Spec { return artifactSpec }

var artifactSpec = hcldec.ObjectSpec{
	"kind":         &hcldec.AttrSpec{Name: "kind", Type: cty.String, Required: true},
	"source":       &hcldec.AttrSpec{Name: "source", Type: cty.String, Required: true},
	"architecture": &hcldec.AttrSpec{Name: "architecture", Type: cty.String},
	"guest_family": &hcldec.AttrSpec{Name: "guest_family", Type: cty.String},
	"digest":       &hcldec.AttrSpec{Name: "digest", Type: cty.String},
	"driver":       &hcldec.AttrSpec{Name: "driver", Type: cty.String},
}

// Decode implements config.Schema.
func (*Artifact) Decode(req *config.DecodeRequest) (*config.Decoded, hcl.Diagnostics) {
	d := newDiags(req)
	v := req.Value
	d.checkSecrets(req)
	c := ArtifactConfig{Driver: str(v, "driver"), Kind: str(v, "kind"), Source: str(v, "source"), BaseDir: req.BaseDir,
		Architecture: str(v, "architecture"), GuestFamily: str(v, "guest_family"), Pinned: str(v, "digest")}
	if c.Driver == "" {
		c.Driver = DefaultArtifactDriver
	}
	if c.Architecture == "" {
		c.Architecture = "amd64"
	}
	if c.GuestFamily == "" {
		c.GuestFamily = "linux"
	}
	if !oneOf(c.Kind, ArtifactKinds...) {
		d.add(d.attr("kind"), "Invalid artifact kind", "kind %q is not one of %v", c.Kind, ArtifactKinds)
	}
	if c.Source == "" {
		d.add(d.attr("source"), "Invalid artifact source", "source must name a local archive, directory or file")
	}
	if !oneOf(c.Architecture, "amd64", "arm64") {
		d.add(d.attr("architecture"), "Invalid architecture", "architecture %q is not amd64 or arm64", c.Architecture)
	}
	if !oneOf(c.GuestFamily, "linux") {
		d.add(d.attr("guest_family"), "Invalid guest family", "guest_family %q is not supported (linux)", c.GuestFamily)
	}
	if c.Pinned != "" && !digestRE.MatchString(c.Pinned) {
		d.add(d.attr("digest"), "Invalid digest", "digest %q must be sha256: followed by 64 lower-case hex digits", c.Pinned)
	}
	if d.list.HasErrors() {
		return nil, d.list
	}
	addr := req.Addr // not req in the closures: req holds the decoded value and body, kept alive as long as the closures
	return &config.Decoded{Config: c, RefFunc: func() cty.Value { return artifactRef(addr, c) }}, d.list
}

// Desired implements plans.Handler: it completes the stored form with the artifact's digest.
func (*Artifact) Desired(ri *config.ResourceInstance, facts plans.Facts) (json.RawMessage, error) {
	c, err := configOf[ArtifactConfig](ri)
	if err != nil {
		return nil, err
	}
	id, ok := facts.Artifacts[ri.Addr.String()]
	if !ok || id.Digest == "" {
		return nil, fmt.Errorf("%s: artifact %s has no resolved digest (source %s)", ri.Addr, c.Kind, c.Source)
	}
	if c.Pinned != "" && c.Pinned != id.Digest {
		return nil, fmt.Errorf("%s: %w: source %s has %s, configuration pins %s", ri.Addr, driver.ErrDigestMismatch, c.Source, id.Digest, c.Pinned)
	}
	c.Digest, c.Size = id.Digest, id.Size
	return marshalStored(c)
}

var artifactRules = map[string]attrRule{
	"digest":        {effect: plans.ForcesReplacement, why: "artifact content changed"},
	"size":          {effect: plans.NoEffect},
	"base_dir":      {effect: plans.NoEffect, why: "the topology directory moved; the digest decides"},
	"pinned_digest": {effect: plans.NoEffect, why: "the pin is checked against the digest"},
}

// Diff implements plans.Handler. Every identity attribute forces replacement.
func (*Artifact) Diff(prior, desired json.RawMessage) (plans.Diff, error) {
	return diffAttrs(prior, desired, artifactRules, "")
}

// Requirements implements plans.Handler.
func (*Artifact) Requirements(attrs json.RawMessage, action plans.Action) (plans.Requirement, error) {
	return driverRequirement(attrs, action, driver.CapArtifact)
}
