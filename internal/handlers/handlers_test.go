package handlers_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
)

func decode(t *testing.T, src string) map[string]*config.ResourceInstance {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(src), 0o644)
	m, s, diags := config.Load(dir)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	top, diags := config.Evaluate(m, s, config.Options{Schemas: handlers.Builtin()})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	out := map[string]*config.ResourceInstance{}
	for _, r := range top.Resources {
		out[r.Addr.String()] = r
	}
	return out
}

func stored(t *testing.T, r *config.ResourceInstance) json.RawMessage {
	t.Helper()
	h, _ := handlers.Builtin().Get(r.Addr.Resource.Type)
	b, err := h.Desired(r, plans.Facts{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDefaultMACIsStableAndLocal(t *testing.T) {
	rs := decode(t, `
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "a" {
  count = 2
  attachment "lan" { network = sysbox_network.lan }
  attachment "mgmt" { network = sysbox_network.lan }
}
resource "sysbox_node" "b" {
  attachment "lan" {
    network = sysbox_network.lan
    mac     = "02:AA:bb:00:00:01"
  }
}`)
	mac := func(addr, att string) string {
		return rs[addr].Config.(handlers.NodeConfig).Attachments[att].MAC
	}
	re := regexp.MustCompile(`^[0-9a-f]{2}(:[0-9a-f]{2}){5}$`)
	seen := map[string]string{}
	for _, k := range [][2]string{{"sysbox_node.a[0]", "lan"}, {"sysbox_node.a[0]", "mgmt"}, {"sysbox_node.a[1]", "lan"}} {
		m := mac(k[0], k[1])
		if !re.MatchString(m) {
			t.Errorf("%v: MAC %q malformed", k, m)
		}
		if b := m[1]; !strings.ContainsRune("26ae", rune(b)) {
			t.Errorf("%v: MAC %q is not locally administered unicast (second hex digit %c)", k, m, b)
		}
		if prev, dup := seen[m]; dup {
			t.Errorf("%v and %s share MAC %s", k, prev, m)
		}
		seen[m] = k[0] + "/" + k[1]
	}
	again := decode(t, `
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "a" {
  count = 2
  attachment "lan" { network = sysbox_network.lan }
}`)
	if got, want := again["sysbox_node.a[1]"].Config.(handlers.NodeConfig).Attachments["lan"].MAC, mac("sysbox_node.a[1]", "lan"); got != want {
		t.Errorf("default MAC not stable across evaluations: got %s, want %s", got, want)
	}
	if got := mac("sysbox_node.b", "lan"); got != "02:aa:bb:00:00:01" {
		t.Errorf("configured MAC: got %s, want it normalised to 02:aa:bb:00:00:01", got)
	}
}

func TestNodeDiffEffects(t *testing.T) {
	base := `
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "n" {
  %s
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.%s/24"]
  }
  provisioner "exec" { command = ["%s"] }
}`
	render := func(extra, ip, prov string) json.RawMessage {
		src := strings.Replace(strings.Replace(strings.Replace(base, "%s", extra, 1), "%s", ip, 1), "%s", prov, 1)
		return stored(t, decode(t, src)["sysbox_node.n"])
	}
	prior := render("cpus = 1", "10", "true")
	tests := []struct {
		name       string
		desired    json.RawMessage
		wantAction plans.Action
		wantPaths  map[string]plans.Effect
	}{
		{"same", render("cpus = 1", "10", "true"), plans.NoOp, map[string]plans.Effect{}},
		{"cpus", render("cpus = 2", "10", "true"), plans.Replace, map[string]plans.Effect{"cpus": plans.ForcesReplacement}},
		{"attachment address", render("cpus = 1", "11", "true"), plans.Replace, map[string]plans.Effect{`attachment["lan"].ipv4`: plans.ForcesReplacement}},
		{"provisioner only", render("cpus = 1", "10", "false"), plans.NoOp, map[string]plans.Effect{"provisioner": plans.NoEffect}},
		{"environment", render(`cpus = 1
  environment = { A = "b" }`, "10", "true"), plans.Replace, map[string]plans.Effect{"environment": plans.ForcesReplacement}},
	}
	h := &handlers.Node{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := h.Diff(prior, tt.desired)
			if err != nil {
				t.Fatal(err)
			}
			if d.Action != tt.wantAction {
				t.Errorf("action: got %s (%s), want %s", d.Action, d.Reason, tt.wantAction)
			}
			got := map[string]plans.Effect{}
			for _, c := range d.Changes {
				got[c.Path] = c.Effect
			}
			if len(got) != len(tt.wantPaths) {
				t.Errorf("changes: got %v, want %v", got, tt.wantPaths)
			}
			for p, e := range tt.wantPaths {
				if got[p] != e {
					t.Errorf("%s: got %q, want %q", p, got[p], e)
				}
			}
		})
	}
}

func TestPolicyDiffIsInPlaceUnlessNodeChanges(t *testing.T) {
	src := func(port, node string) json.RawMessage {
		return stored(t, decode(t, `
resource "sysbox_node" "a" {}
resource "sysbox_node" "b" {}
resource "sysbox_firewall" "f" {
  node = sysbox_node.`+node+`
  rule {
    chain            = "input"
    action           = "accept"
    protocol         = "tcp"
    destination_port = `+port+`
  }
}`)["sysbox_firewall.f"])
	}
	h := &handlers.Firewall{}
	prior := src("80", "a")
	if d, _ := h.Diff(prior, src("443", "a")); d.Action != plans.Update {
		t.Errorf("rule change: got %s, want update", d.Action)
	}
	if d, _ := h.Diff(prior, src("80", "b")); d.Action != plans.Replace {
		t.Errorf("node change: got %s, want replace", d.Action)
	}
	var c handlers.FirewallConfig
	json.Unmarshal(src("80", "a"), &c)
	var c2 handlers.FirewallConfig
	json.Unmarshal(src("443", "a"), &c2)
	if c.PolicyDigest == "" || c.PolicyDigest == c2.PolicyDigest {
		t.Errorf("policy digest: got %q and %q, want distinct non-empty digests", c.PolicyDigest, c2.PolicyDigest)
	}
}

func TestDependencyChangedIsTheDependentsCall(t *testing.T) {
	rs := decode(t, `
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "watch" { depends_on = [sysbox_network.lan] }
resource "sysbox_node" "web" {
  attachment "lan" { network = sysbox_network.lan }
}
resource "sysbox_firewall" "f" { node = sysbox_node.web }
resource "sysbox_router" "r" {
  node = sysbox_node.web
  depends_on = [sysbox_node.watch]
}`)
	net := addrs.MustParseInstance("sysbox_network.lan")
	web := addrs.MustParseInstance("sysbox_node.web")
	watch := addrs.MustParseInstance("sysbox_node.watch")
	tests := []struct {
		res  string
		dep  addrs.Instance
		act  plans.Action
		want plans.Action
	}{
		{"sysbox_node.web", net, plans.Replace, plans.Replace},
		{"sysbox_node.web", net, plans.Update, plans.NoOp},
		{"sysbox_node.watch", net, plans.Replace, plans.NoOp}, // depends_on only: no cascade
		{"sysbox_firewall.f", web, plans.Replace, plans.Replace},
		{"sysbox_router.r", web, plans.Create, plans.Replace},
		{"sysbox_router.r", watch, plans.Replace, plans.NoOp},
	}
	reg := handlers.Builtin()
	for _, tt := range tests {
		h, _ := reg.Get(rs[tt.res].Addr.Resource.Type)
		got, why := h.DependencyChanged(rs[tt.res], tt.dep, tt.act)
		if got != tt.want {
			t.Errorf("%s when %s is %s: got %s (%s), want %s", tt.res, tt.dep, tt.act, got, why, tt.want)
		}
		if got == plans.Replace && !strings.Contains(why, tt.dep.String()) {
			t.Errorf("%s: reason %q does not name %s", tt.res, why, tt.dep)
		}
	}
}

func TestRequirements(t *testing.T) {
	rs := decode(t, `
resource "sysbox_artifact" "img" {
  kind   = "oci_image"
  source = "./img.tar"
}
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "bare" {}
resource "sysbox_node" "full" {
  driver   = "docker"
  artifact = sysbox_artifact.img
  attachment "lan" { network = sysbox_network.lan }
  provisioner "exec" { command = ["true"] }
}
resource "sysbox_firewall" "f" { node = sysbox_node.full }`)
	reg := handlers.Builtin()
	tests := []struct {
		addr   string
		action plans.Action
		driver string
		caps   []driver.Capability
	}{
		{"sysbox_node.bare", plans.Create, "netns", []driver.Capability{driver.CapNodeLifecycle, driver.CapNodeState}},
		{"sysbox_node.full", plans.Replace, "docker", []driver.Capability{driver.CapNodeLifecycle, driver.CapNodeState, driver.CapNIC, driver.CapGuestExec}},
		{"sysbox_node.full", plans.Delete, "docker", []driver.Capability{driver.CapNodeLifecycle, driver.CapNodeState}},
		{"sysbox_network.lan", plans.Create, "netns", []driver.Capability{driver.CapManagedNetwork}},
		{"sysbox_firewall.f", plans.Update, "nftables", []driver.Capability{driver.CapPolicy}},
		{"sysbox_firewall.f", plans.NoOp, "nftables", nil},
	}
	for _, tt := range tests {
		r := rs[tt.addr]
		h, _ := reg.Get(r.Addr.Resource.Type)
		var attrs json.RawMessage
		if r.Addr.Resource.Type == "sysbox_artifact" {
			continue
		}
		attrs = stored(t, r)
		req, err := h.Requirements(attrs, tt.action)
		if err != nil {
			t.Fatal(err)
		}
		if req.Driver != tt.driver || !slices.Equal(req.Capabilities, tt.caps) {
			t.Errorf("%s %s: got %s %v, want %s %v", tt.addr, tt.action, req.Driver, req.Capabilities, tt.driver, tt.caps)
		}
	}
}

func TestRegistry(t *testing.T) {
	r := handlers.Builtin()
	if err := r.Register(&handlers.Node{}); err == nil {
		t.Error("duplicate registration: got nil error")
	}
	if got := r.Types(addrs.Data); !slices.Equal(got, []string{"sysbox_artifact"}) {
		t.Errorf("data types: got %v", got)
	}
	if got := len(r.Types(addrs.Managed)); got != 5 {
		t.Errorf("managed types: got %d, want 5", got)
	}
	if _, ok := r.Schema(addrs.Data, "sysbox_node"); ok {
		t.Error("sysbox_node as a data source: got a schema")
	}
}

func TestDataSourceIsRead(t *testing.T) {
	rs := decode(t, `
data "sysbox_artifact" "kernel" {
  kind   = "kernel"
  source = "./vmlinux"
}
resource "sysbox_node" "vm" {
  driver   = "firecracker"
  kernel   = data.sysbox_artifact.kernel
  artifact = sysbox_artifact.root
}
resource "sysbox_artifact" "root" {
  kind   = "rootfs"
  source = "./rootfs.ext4"
}`)
	vm := rs["sysbox_node.vm"].Config.(handlers.NodeConfig)
	if vm.Kernel != "data.sysbox_artifact.kernel" || vm.Artifact != "sysbox_artifact.root" {
		t.Errorf("references: got kernel %q artifact %q", vm.Kernel, vm.Artifact)
	}
	deps := rs["sysbox_node.vm"].DependsOn
	if len(deps) != 2 {
		t.Errorf("deps: got %v, want the data source and the artifact", deps)
	}
}

// KeepFromPrior keeps a prior MAC only for an attachment whose MAC is derived; otherwise it
// returns the desired attributes as they are.
func TestNodeKeepFromPrior(t *testing.T) {
	rs := decode(t, `
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "n" {
  attachment "lan" { network = sysbox_network.lan }
  attachment "mgmt" {
    network = sysbox_network.lan
    mac     = "02:aa:bb:00:00:01"
  }
}`)
	ri := rs["sysbox_node.n"]
	desired := stored(t, ri)
	var n handlers.Node
	macs := func(b json.RawMessage) map[string]string {
		var v struct {
			Attachments map[string]struct {
				MAC string `json:"mac"`
			} `json:"attachment"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		out := map[string]string{}
		for k, a := range v.Attachments {
			out[k] = a.MAC
		}
		return out
	}
	derived := macs(desired)["lan"]
	for _, tc := range []struct {
		name, prior string
		want        map[string]string
	}{
		{"same MACs", string(desired), map[string]string{"lan": derived, "mgmt": "02:aa:bb:00:00:01"}},
		{"derived MAC differs: kept", `{"attachment":{"lan":{"mac":"02:00:00:00:00:99"},"mgmt":{"mac":"02:00:00:00:00:98"}}}`,
			map[string]string{"lan": "02:00:00:00:00:99", "mgmt": "02:aa:bb:00:00:01"}},
		{"configured MAC differs: compared as configured", `{"attachment":{"mgmt":{"mac":"02:00:00:00:00:98"}}}`,
			map[string]string{"lan": derived, "mgmt": "02:aa:bb:00:00:01"}},
		{"no prior MAC", `{"attachment":{"lan":{}}}`, map[string]string{"lan": derived, "mgmt": "02:aa:bb:00:00:01"}},
	} {
		got, err := n.KeepFromPrior(ri, json.RawMessage(tc.prior), desired)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if m := macs(got); m["lan"] != tc.want["lan"] || m["mgmt"] != tc.want["mgmt"] {
			t.Errorf("%s: MACs %v, want %v", tc.name, m, tc.want)
		}
	}
	if _, err := n.KeepFromPrior(ri, json.RawMessage(`{`), desired); err == nil || !strings.Contains(err.Error(), "prior attributes") {
		t.Errorf("torn prior attributes: got %v, want an error naming them", err)
	}
}

// TestNodeDriverSpecRefusesNullAttachment: stored attributes with a null attachment (a
// hand-edited plan or state) are an error naming the attachment, not a nil dereference.
func TestNodeDriverSpecRefusesNullAttachment(t *testing.T) {
	_, err := (&handlers.Node{}).DriverSpec(json.RawMessage(`{"driver":"netns","attachment":{"lan":null}}`), nil)
	if err == nil || !strings.Contains(err.Error(), `attachment "lan": null`) {
		t.Fatalf("got %v, want an error naming attachment \"lan\"", err)
	}
	spec, err := (&handlers.Node{}).DriverSpec(json.RawMessage(`{"driver":"netns","attachment":{"lan":{"network":"sysbox_network.lan","mac":"02:00:00:00:00:01"}}}`), nil)
	if err != nil || spec.Node == nil || len(spec.Node.Attachments) != 1 || spec.Node.Attachments[0].Network.String() != "sysbox_network.lan" {
		t.Fatalf("got %+v, %v; want one attachment to sysbox_network.lan", spec.Node, err)
	}
}

// TestAttachmentReferenceNamesItsLabel: the attribute a network reference is reported under
// quotes the attachment's label as %q does (node.go writes it with strconv.Quote).
func TestAttachmentReferenceNamesItsLabel(t *testing.T) {
	dir := t.TempDir()
	src := "resource \"sysbox_node\" \"a\" {\n  attachment \"l\\\"é\\tx\" { network = \"sysbox_network.missing\" }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, s, diags := config.Load(dir)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	_, diags = config.Evaluate(m, s, config.Options{Schemas: handlers.Builtin()})
	want := "sysbox_node.a: " + fmt.Sprintf("attachment[%q].network", "l\"é\tx") + " names sysbox_network.missing, which the configuration does not declare"
	if len(diags) != 1 || diags[0].Detail != want {
		t.Fatalf("got %v, want one error %q", diags, want)
	}
}

// TestUnknownAttachmentListsTheNodesInOrder: the attachments a router or firewall could have
// named are listed sorted, the same every run (they were listed in map order).
func TestUnknownAttachmentListsTheNodesInOrder(t *testing.T) {
	dir := t.TempDir()
	src := `
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "gw" {
  attachment "lan" { network = sysbox_network.lan }
  attachment "an" { network = sysbox_network.lan }
  attachment "mgmt" { network = sysbox_network.lan }
}
resource "sysbox_router" "edge" {
  node = sysbox_node.gw
  masquerade {
    out_attachment = "wan"
    source         = "198.51.100.0/24"
  }
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	want := `sysbox_router.edge: masquerade 0: the node has no attachment "wan" (it has [an lan mgmt])`
	for i := 0; i < 20; i++ {
		m, s, diags := config.Load(dir)
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		_, diags = config.Evaluate(m, s, config.Options{Schemas: handlers.Builtin()})
		if len(diags) != 1 || diags[0].Detail != want {
			t.Fatalf("run %d: got %v, want one error %q", i, diags, want)
		}
	}
}
