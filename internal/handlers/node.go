package handlers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strconv"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
)

// NodeConfig is the stored form of sysbox_node.
type NodeConfig struct {
	Driver   string `json:"driver"`
	Artifact string `json:"artifact,omitempty"` // canonical address
	Kernel   string `json:"kernel,omitempty"`   // canonical address
	// ArtifactDigest and KernelDigest are the baseline's content digests at plan time (facts):
	// a changed baseline replaces the node even when the artifact is a data source.
	ArtifactDigest string            `json:"artifact_digest,omitempty"`
	KernelDigest   string            `json:"kernel_digest,omitempty"`
	CPUs           int               `json:"cpus,omitempty"`
	MemoryMB       int               `json:"memory_mb,omitempty"`
	Command        []string          `json:"command,omitempty"`
	Environment    map[string]string `json:"environment,omitempty"` // values may be secret references
	Hostname       string            `json:"hostname,omitempty"`
	// Attachments by logical name. Pointers: a map's smallest table has eight slots, and eight
	// whole Attachments made every node's one-entry map ~1 KB of live heap (a tenth of a
	// large topology's); eight pointers are 200 bytes.
	Attachments map[string]*Attachment `json:"attachment,omitempty"`
	Routes      []Route                `json:"route,omitempty"`
	Provisioner []Provisioner          `json:"provisioner,omitempty"`
}

// Attachment is a node's connection to a network; identity = (node address, name) (S8).
type Attachment struct {
	Network string   `json:"network"` // canonical address of a sysbox_network
	IPv4    []string `json:"ipv4,omitempty"`
	MAC     string   `json:"mac"` // configured, or derived from address + name at creation
	// MACDerived says MAC was not configured: once the node exists, its MAC is the one fixed in
	// state at creation (KeepFromPrior), whatever address the node has since been moved to.
	MACDerived bool     `json:"-"`
	Gateway    string   `json:"gateway,omitempty"`
	Aliases    []string `json:"aliases,omitempty"`
}

// Route is a static route inside the node.
type Route struct {
	To  string `json:"to"`
	Via string `json:"via"`
}

// Provisioner runs once after the node is created and wired.
type Provisioner struct {
	Type    string   `json:"type"`
	Command []string `json:"command"`
}

var envKeyRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

var _ plans.PriorKeeper = (*Node)(nil)

// Node handles sysbox_node.
type Node struct {
	// Drivers, when set, are the node drivers a configuration may name (the driver registry's
	// drivers with node capability); when nil, the planner's capability check alone decides.
	Drivers []string
}

func (*Node) Type() string        { return "sysbox_node" }
func (*Node) Modes() (bool, bool) { return true, false }
func (*Node) SchemaVersion() int  { return 1 }

// Spec implements config.Schema.
func (*Node) Spec() hcldec.Spec { return nodeSpec }

var nodeSpec = hcldec.ObjectSpec{
	"driver":      &hcldec.AttrSpec{Name: "driver", Type: cty.String},
	"artifact":    &hcldec.AttrSpec{Name: "artifact", Type: cty.DynamicPseudoType},
	"kernel":      &hcldec.AttrSpec{Name: "kernel", Type: cty.DynamicPseudoType},
	"cpus":        &hcldec.AttrSpec{Name: "cpus", Type: cty.Number},
	"memory_mb":   &hcldec.AttrSpec{Name: "memory_mb", Type: cty.Number},
	"command":     &hcldec.AttrSpec{Name: "command", Type: cty.List(cty.String)},
	"environment": &hcldec.AttrSpec{Name: "environment", Type: cty.Map(cty.String)},
	"hostname":    &hcldec.AttrSpec{Name: "hostname", Type: cty.String},
	"attachment": &hcldec.BlockObjectSpec{TypeName: "attachment", LabelNames: []string{"name"}, Nested: hcldec.ObjectSpec{
		"network": &hcldec.AttrSpec{Name: "network", Type: cty.DynamicPseudoType, Required: true},
		"ipv4":    &hcldec.AttrSpec{Name: "ipv4", Type: cty.List(cty.String)},
		"mac":     &hcldec.AttrSpec{Name: "mac", Type: cty.String},
		"gateway": &hcldec.AttrSpec{Name: "gateway", Type: cty.String},
		"aliases": &hcldec.AttrSpec{Name: "aliases", Type: cty.List(cty.String)},
	}},
	"route": &hcldec.BlockListSpec{TypeName: "route", Nested: hcldec.ObjectSpec{
		"to":  &hcldec.AttrSpec{Name: "to", Type: cty.String, Required: true},
		"via": &hcldec.AttrSpec{Name: "via", Type: cty.String, Required: true},
	}},
	"provisioner": &hcldec.BlockListSpec{TypeName: "provisioner", Nested: hcldec.ObjectSpec{
		"type":    &hcldec.BlockLabelSpec{Index: 0, Name: "type"},
		"command": &hcldec.AttrSpec{Name: "command", Type: cty.List(cty.String), Required: true},
	}},
}

// ReadsAttrs implements config.AttrReader: Decode reads the body with req.Attr only.
func (*Node) ReadsAttrs() {}

var _ config.AttrReader = (*Node)(nil)

// Decode implements config.Schema.
func (n *Node) Decode(req *config.DecodeRequest) (*config.Decoded, hcl.Diagnostics) {
	d := newDiags(req)
	var v attrs = req // never req.Value (ReadsAttrs)
	d.checkSecrets(req, "environment", "provisioner")
	c := NodeConfig{Driver: attrStr(v, "driver"), Command: attrStrList(v, "command"), Environment: attrStrMap(v, "environment"), Hostname: attrStr(v, "hostname")}
	if c.Driver == "" {
		c.Driver = "netns"
	}
	if n.Drivers != nil && !oneOf(c.Driver, n.Drivers...) {
		d.add(d.attr("driver"), "Invalid node driver", "driver %q is not one of %v", c.Driver, n.Drivers)
	}
	refs := decodeNodeArtifacts(d, v, &c)
	checkNodeScalars(d, v, &c)
	refs = append(refs, decodeAttachments(d, req, v, &c)...)
	decodeRoutes(d, v, &c)
	decodeProvisioners(d, v, &c)
	if d.list.HasErrors() {
		return nil, d.list
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].Attr < refs[j].Attr })
	addr := req.Addr // not req in the closures: req holds the decoded value and body, kept alive as long as the closures
	cfg := any(c)    // the one copy of c on the heap: the closures read it too
	return &config.Decoded{Config: cfg, RefFunc: func() cty.Value { return nodeRef(addr, cfg.(NodeConfig)) },
		RefAttr: func(n string) (cty.Value, bool) { return nodeAttr(addr, cfg.(NodeConfig), n) }, References: refs}, d.list
}

// decodeNodeArtifacts sets c.Artifact and c.Kernel from their references, checks that the
// driver gets the artifact kinds it needs, and returns the references.
func decodeNodeArtifacts(d *diags, v attrs, c *NodeConfig) []config.Reference {
	var refs []config.Reference
	artKind := func(name string) (string, bool) {
		a, obj, ok := attrRef(d, v, name, "sysbox_artifact", d.attr(name))
		if !ok {
			return "", false
		}
		refs = append(refs, config.Reference{Addr: a, Attr: name, Range: d.attr(name)})
		if name == "artifact" {
			c.Artifact = a.String()
		} else {
			c.Kernel = a.String()
		}
		if obj != cty.NilVal {
			return str(obj, "kind"), true
		}
		return "", true
	}
	ak, hasArt := artKind("artifact")
	kk, hasKernel := artKind("kernel")
	wantKind := func(name, got string, kinds ...string) {
		if got != "" && !oneOf(got, kinds...) {
			d.add(d.attr(name), "Wrong artifact kind", "driver %s needs %s of kind %v, got %q", c.Driver, name, kinds, got)
		}
	}
	switch c.Driver {
	case "netns":
		if hasKernel {
			d.add(d.attr("kernel"), "Kernel not used", "netns nodes share the host kernel; remove kernel")
		}
	case "docker":
		if !hasArt {
			d.add(d.decl, "Missing artifact", "docker nodes need artifact (an oci_image or rootfs archive)")
		}
		wantKind("artifact", ak, "oci_image", "rootfs")
		if hasKernel {
			d.add(d.attr("kernel"), "Kernel not used", "docker nodes share the host kernel; remove kernel")
		}
	case "libvirt":
		if !hasArt {
			d.add(d.decl, "Missing artifact", "libvirt nodes need artifact (a qcow2 disk)")
		}
		wantKind("artifact", ak, "qcow2", "rootfs")
		wantKind("kernel", kk, "kernel")
	case "firecracker":
		if !hasArt || !hasKernel {
			d.add(d.decl, "Missing artifact", "firecracker nodes need artifact (a rootfs) and kernel")
		}
		wantKind("artifact", ak, "rootfs")
		wantKind("kernel", kk, "kernel")
	}
	return refs
}

// checkNodeScalars sets and checks cpus and memory_mb, and checks hostname and environment keys.
func checkNodeScalars(d *diags, v attrs, c *NodeConfig) {
	var ok bool
	if c.CPUs, ok = attrNum(v, "cpus"); !ok || c.CPUs < 0 || c.CPUs > 256 {
		d.add(d.attr("cpus"), "Invalid cpus", "cpus must be a whole number from 1 to 256")
	}
	if c.MemoryMB, ok = attrNum(v, "memory_mb"); !ok || c.MemoryMB < 0 || c.MemoryMB > 1<<20 {
		d.add(d.attr("memory_mb"), "Invalid memory_mb", "memory_mb must be a whole number of MiB")
	}
	if c.Hostname != "" && !hostnameRE.MatchString(c.Hostname) {
		d.add(d.attr("hostname"), "Invalid hostname", "hostname %q is not a valid host name label", c.Hostname)
	}
	for k := range c.Environment {
		if !envKeyRE.MatchString(k) {
			d.add(d.attr("environment"), "Invalid environment", "environment key %q is not a valid variable name", k)
		}
	}
}

// decodeAttachments sets c.Attachments (addresses inside their network, MAC derived when not
// configured) and returns the network references.
func decodeAttachments(d *diags, req *config.DecodeRequest, v attrs, c *NodeConfig) []config.Reference {
	var refs []config.Reference
	if atts, _ := v.Attr("attachment"); !atts.IsNull() && atts.LengthInt() > 0 {
		c.Attachments = make(map[string]*Attachment, atts.LengthInt())
		for it := atts.ElementIterator(); it.Next(); {
			nv, av := it.Element()
			name := nv.AsString()
			at := &Attachment{IPv4: strList(av, "ipv4"), MAC: str(av, "mac"), Gateway: str(av, "gateway"), Aliases: strList(av, "aliases")}
			nrng := d.block("attachment", name, 0, "network")
			na, nobj, ok := ref(d, av, "network", "sysbox_network", nrng)
			if ok {
				at.Network = na.String()
				refs = append(refs, config.Reference{Addr: na, Attr: "attachment[" + strconv.Quote(name) + "].network", Range: nrng}) // %q is strconv.Quote
			}
			var netPrefix netip.Prefix
			if nobj != cty.NilVal {
				netPrefix, _ = netip.ParsePrefix(str(nobj, "ipv4_cidr"))
			}
			for _, ip := range at.IPv4 {
				p, err := ipv4Prefix(ip)
				rng := d.block("attachment", name, 0, "ipv4")
				switch {
				case err != nil:
					d.add(rng, "Invalid attachment address", "attachment %q: ipv4: %v", name, err)
				case netPrefix.IsValid() && !netPrefix.Contains(p.Addr()):
					d.add(rng, "Address outside the network", "attachment %q: %s is not inside %s (%s)", name, ip, netPrefix, at.Network)
				case netPrefix.IsValid() && (p.Addr() == netPrefix.Masked().Addr()):
					d.add(rng, "Invalid attachment address", "attachment %q: %s is the network address of %s", name, ip, netPrefix)
				}
			}
			if at.Gateway != "" {
				if _, err := ipv4Addr(at.Gateway); err != nil {
					d.add(d.block("attachment", name, 0, "gateway"), "Invalid gateway", "attachment %q: gateway: %v", name, err)
				}
			}
			if at.MAC == "" {
				at.MAC, at.MACDerived = defaultMAC(req.Addr, name), true
			} else if hw, err := net.ParseMAC(at.MAC); err != nil || len(hw) != 6 || hw[0]&1 == 1 {
				d.add(d.block("attachment", name, 0, "mac"), "Invalid MAC", "attachment %q: mac %q must be a unicast 48-bit MAC like 02:00:00:00:00:01", name, at.MAC)
			} else {
				at.MAC = hw.String()
			}
			for _, al := range at.Aliases {
				if !hostnameRE.MatchString(al) {
					d.add(d.block("attachment", name, 0, "aliases"), "Invalid alias", "attachment %q: alias %q is not a valid host name label", name, al)
				}
			}
			c.Attachments[name] = at
		}
	}
	return refs
}

// decodeRoutes sets c.Routes ("default" is 0.0.0.0/0).
func decodeRoutes(d *diags, v attrs, c *NodeConfig) {
	if rs, _ := v.Attr("route"); !rs.IsNull() {
		i := 0
		for it := rs.ElementIterator(); it.Next(); i++ {
			_, rv := it.Element()
			r := Route{To: str(rv, "to"), Via: str(rv, "via")}
			if r.To == "default" {
				r.To = "0.0.0.0/0"
			}
			if _, err := ipv4Prefix(r.To); err != nil {
				d.add(d.block("route", "", i, "to"), "Invalid route", "route %d: to: %v", i, err)
			}
			if _, err := ipv4Addr(r.Via); err != nil {
				d.add(d.block("route", "", i, "via"), "Invalid route", "route %d: via: %v", i, err)
			}
			c.Routes = append(c.Routes, r)
		}
	}
}

// decodeProvisioners sets c.Provisioner (exec only, with a command).
func decodeProvisioners(d *diags, v attrs, c *NodeConfig) {
	if ps, _ := v.Attr("provisioner"); !ps.IsNull() {
		i := 0
		for it := ps.ElementIterator(); it.Next(); i++ {
			_, pv := it.Element()
			p := Provisioner{Type: str(pv, "type"), Command: strList(pv, "command")}
			if p.Type != "exec" {
				d.add(d.block("provisioner", "", i, ""), "Unknown provisioner", "provisioner %q is not supported (exec)", p.Type)
			}
			if len(p.Command) == 0 {
				d.add(d.block("provisioner", "", i, "command"), "Empty provisioner command", "provisioner %d: command must name a program", i)
			}
			c.Provisioner = append(c.Provisioner, p)
		}
	}
}

// Desired implements plans.Handler: the configuration plus the baseline digests.
func (*Node) Desired(ri *config.ResourceInstance, facts plans.Facts) (json.RawMessage, error) {
	c, err := configOf[NodeConfig](ri)
	if err != nil {
		return nil, err
	}
	if c.Artifact != "" {
		c.ArtifactDigest = facts.Artifacts[c.Artifact].Digest
	}
	if c.Kernel != "" {
		c.KernelDigest = facts.Artifacts[c.Kernel].Digest
	}
	return marshalStored(c)
}

// KeepFromPrior implements plans.PriorKeeper: an attachment whose MAC is not configured keeps
// the MAC its node was created with (state mv then rename plans no change). A configured MAC
// is compared as configured.
func (*Node) KeepFromPrior(ri *config.ResourceInstance, prior, desired json.RawMessage) (json.RawMessage, error) {
	c, err := configOf[NodeConfig](ri)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(prior, desired) {
		return desired, nil // every MAC is the prior one already (the no-change plan)
	}
	var p struct {
		Attachments map[string]struct {
			MAC string `json:"mac"`
		} `json:"attachment"`
	}
	if err := json.Unmarshal(prior, &p); err != nil {
		return nil, fmt.Errorf("prior attributes: %w", err)
	}
	// desired is c marshalled (Desired), so its attachments' MACs are c's: decode it only when
	// a MAC is kept (a no-change plan of N nodes decoded N configurations for nothing).
	keep := false
	for name, at := range c.Attachments {
		if pa, ok := p.Attachments[name]; ok && at != nil && pa.MAC != "" && at.MACDerived && pa.MAC != at.MAC {
			keep = true
			break
		}
	}
	if !keep {
		return desired, nil
	}
	var d NodeConfig
	if err := json.Unmarshal(desired, &d); err != nil {
		return nil, fmt.Errorf("desired attributes: %w", err)
	}
	for name, at := range d.Attachments {
		pa, ok := p.Attachments[name]
		if ca := c.Attachments[name]; at == nil || ca == nil || !ok || pa.MAC == "" || !ca.MACDerived || pa.MAC == at.MAC {
			continue
		}
		at.MAC = pa.MAC
	}
	return marshalStored(d)
}

// nodeRules: a node has no in-place update. Every attribute that shapes the running node
// forces replacement; provisioners run only when a node is created, so changing them has no
// effect on an existing node (reset or replace to run them again).
var nodeRules = map[string]attrRule{
	"driver":          {effect: plans.ForcesReplacement, why: "a node cannot move between drivers"},
	"artifact":        {effect: plans.ForcesReplacement, why: "the node's baseline changes"},
	"kernel":          {effect: plans.ForcesReplacement, why: "the node's baseline changes"},
	"artifact_digest": {effect: plans.ForcesReplacement, why: "the baseline's content changed"},
	"kernel_digest":   {effect: plans.ForcesReplacement, why: "the baseline's content changed"},
	"cpus":            {effect: plans.ForcesReplacement, why: "resources are fixed at creation"},
	"memory_mb":       {effect: plans.ForcesReplacement, why: "resources are fixed at creation"},
	"command":         {effect: plans.ForcesReplacement, why: "the main process is fixed at creation"},
	"environment":     {effect: plans.ForcesReplacement, why: "the environment is fixed at creation"},
	"hostname":        {effect: plans.ForcesReplacement, why: "the hostname is fixed at creation"},
	"attachment":      {effect: plans.ForcesReplacement, why: "attachments are wired at creation", perKey: true},
	"route":           {effect: plans.ForcesReplacement, why: "guest network is configured at creation"},
	"provisioner":     {effect: plans.NoEffect, why: "provisioners run only when the node is created"},
}

// Diff implements plans.Handler.
func (*Node) Diff(prior, desired json.RawMessage) (plans.Diff, error) {
	return diffAttrs(prior, desired, nodeRules, "")
}

// DependencyChanged implements plans.Handler: replacing a node's artifact, kernel or an
// attachment's network replaces the node; anything else (depends_on, a firewall) does not.
func (*Node) DependencyChanged(ri *config.ResourceInstance, dep addrs.Instance, a plans.Action) (plans.Action, string) {
	c, ok := ri.Config.(NodeConfig)
	if !ok || (a != plans.Replace && a != plans.Create) {
		return plans.NoOp, ""
	}
	ds := dep.String()
	verb := "replaced"
	if a == plans.Create {
		verb = "recreated"
	}
	switch ds {
	case c.Artifact:
		return plans.Replace, fmt.Sprintf("artifact %s is %s (new baseline)", ds, verb)
	case c.Kernel:
		return plans.Replace, fmt.Sprintf("kernel %s is %s (new baseline)", ds, verb)
	}
	names := make([]string, 0, len(c.Attachments))
	for n := range c.Attachments {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if at := c.Attachments[n]; at != nil && at.Network == ds {
			return plans.Replace, fmt.Sprintf("attachment %q: network %s is %s", n, ds, verb)
		}
	}
	return plans.NoOp, ""
}

// Requirements implements plans.Handler.
func (*Node) Requirements(attrs json.RawMessage, action plans.Action) (plans.Requirement, error) {
	// Only what decides the capabilities: decoding whole NodeConfigs here was a tenth of a
	// 10,000-node plan's allocations.
	var c struct {
		Driver      string              `json:"driver"`
		Attachments map[string]struct{} `json:"attachment"`
		Provisioner []struct{}          `json:"provisioner"`
	}
	if err := json.Unmarshal(attrs, &c); err != nil {
		return plans.Requirement{}, err
	}
	r := plans.Requirement{Driver: c.Driver}
	switch action {
	case plans.Create, plans.Replace:
		r.Capabilities = []driver.Capability{driver.CapNodeLifecycle, driver.CapNodeState}
		if len(c.Attachments) > 0 {
			r.Capabilities = append(r.Capabilities, driver.CapNIC)
		}
		if len(c.Provisioner) > 0 {
			r.Capabilities = append(r.Capabilities, driver.CapGuestExec)
		}
	case plans.Delete:
		r.Capabilities = []driver.Capability{driver.CapNodeLifecycle, driver.CapNodeState}
	}
	return r, nil
}
