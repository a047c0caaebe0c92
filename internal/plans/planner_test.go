package plans_test

import (
	"errors"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/pkg/substrate"
)

const baseLab = `
variable "cpus" {
  type    = number
  default = 1
}
variable "cidr" {
  type    = string
  default = "198.51.100.0/24"
}
variable "rule_port" {
  type    = number
  default = 80
}
variable "provision" {
  type    = string
  default = "echo ready"
}
resource "sysbox_artifact" "img" {
  kind   = "rootfs"
  source = "./rootfs"
}
resource "sysbox_network" "lan" {
  ipv4_cidr = var.cidr
}
resource "sysbox_node" "web" {
  count    = 2
  cpus     = var.cpus
  artifact = sysbox_artifact.img
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["${cidrhost(var.cidr, 10 + count.index)}/24"]
  }
  provisioner "exec" {
    command = ["sh", "-c", var.provision]
  }
}
resource "sysbox_node" "watcher" {
  depends_on = [sysbox_network.lan]
}
resource "sysbox_firewall" "web" {
  node          = sysbox_node.web[0]
  default_input = "drop"
  rule {
    chain            = "input"
    action           = "accept"
    protocol         = "tcp"
    destination_port = var.rule_port
  }
}
`

func vars(kv ...string) map[string]config.InputValue {
	m := map[string]config.InputValue{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = config.InputValue{Raw: kv[i+1], IsRaw: true, Source: "-var " + kv[i]}
	}
	return m
}

func TestPlanCreateOrder(t *testing.T) {
	tp := topo(t, map[string]string{"main.sysbox.hcl": baseLab}, nil)
	p, err := planner().Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{LineageID: "lineage-1"}, Facts: facts(tp, nil)})
	if err != nil {
		t.Fatal(err)
	}
	want := `create sysbox_artifact.img
create sysbox_network.lan
create sysbox_node.watcher
create sysbox_node.web[0]
create sysbox_node.web[1]
create sysbox_firewall.web
`
	if got := summary(p); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if !p.HasChanges() || p.Applicable() != nil {
		t.Errorf("HasChanges=%v Applicable=%v, want true, nil", p.HasChanges(), p.Applicable())
	}
	fw := find(p, "sysbox_firewall.web")
	if fw.Driver != "nftables" || len(fw.Requires) != 1 || fw.Requires[0] != driver.CapPolicy {
		t.Errorf("firewall requirement: got %s %v, want nftables [policy]", fw.Driver, fw.Requires)
	}
}

func TestPlanAgainstPrior(t *testing.T) {
	base := topo(t, map[string]string{"main.sysbox.hcl": baseLab}, nil)
	first, err := planner().Plan(plans.Request{Topology: base, Prior: &plans.MemoryState{LineageID: "lineage-1"}, Facts: facts(base, nil)})
	if err != nil {
		t.Fatal(err)
	}
	prior := applied(first, 1)
	tests := []struct {
		name   string
		inputs map[string]config.InputValue
		files  map[string]string
		prior  *plans.MemoryState
		facts  map[string]string
		want   map[string]plans.Action // address → action; unlisted must be no-op
		reason map[string]string       // address → substring of reason
	}{
		{name: "unchanged", want: map[string]plans.Action{}},
		{name: "cpus forces replacement", inputs: vars("cpus", "2"),
			want:   map[string]plans.Action{"sysbox_node.web[0]": plans.Replace, "sysbox_node.web[1]": plans.Replace, "sysbox_firewall.web": plans.Replace},
			reason: map[string]string{"sysbox_node.web[0]": "cpus changed (forces replacement", "sysbox_firewall.web": "node sysbox_node.web[0] is replaced"}},
		{name: "provisioner change has no effect", inputs: vars("provision", "echo other"),
			want: map[string]plans.Action{}, reason: map[string]string{"sysbox_node.web[0]": "provisioner changed (no effect"}},
		{name: "firewall rule updates in place", inputs: vars("rule_port", "8080"),
			want:   map[string]plans.Action{"sysbox_firewall.web": plans.Update},
			reason: map[string]string{"sysbox_firewall.web": "replaced atomically in place"}},
		{name: "network change cascades only through handlers", inputs: vars("cidr", "198.51.100.0/25"),
			want: map[string]plans.Action{"sysbox_network.lan": plans.Replace, "sysbox_node.web[0]": plans.Replace,
				"sysbox_node.web[1]": plans.Replace, "sysbox_firewall.web": plans.Replace},
			reason: map[string]string{"sysbox_node.web[1]": `attachment "lan": network sysbox_network.lan is replaced`, "sysbox_network.lan": "ipv4_cidr changed"}},
		{name: "artifact content change", facts: map[string]string{"sysbox_artifact.img": "sha256:" + strings.Repeat("b", 64)},
			want: map[string]plans.Action{"sysbox_artifact.img": plans.Replace, "sysbox_node.web[0]": plans.Replace,
				"sysbox_node.web[1]": plans.Replace, "sysbox_firewall.web": plans.Replace},
			reason: map[string]string{"sysbox_artifact.img": "artifact content changed", "sysbox_node.web[0]": "artifact_digest changed (forces replacement: the baseline's content changed)"}},
		{name: "observation unknown is unknown, never replace", prior: withStatus(prior, "sysbox_node.web[1]", substrate.Unknown),
			want: map[string]plans.Action{"sysbox_node.web[1]": plans.Unknown}, reason: map[string]string{"sysbox_node.web[1]": "observation unknown"}},
		{name: "observed absent is recreated", prior: withStatus(prior, "sysbox_node.watcher", substrate.Absent),
			want: map[string]plans.Action{"sysbox_node.watcher": plans.Create}},
		{name: "drifted node is replaced", prior: withStatus(prior, "sysbox_node.web[1]", substrate.Drifted),
			want: map[string]plans.Action{"sysbox_node.web[1]": plans.Replace}, reason: map[string]string{"sysbox_node.web[1]": "observed drifted"}},
		{name: "drifted firewall is re-applied in place", prior: withStatus(prior, "sysbox_firewall.web", substrate.Drifted),
			want: map[string]plans.Action{"sysbox_firewall.web": plans.Update}},
		{name: "removed resource is deleted", files: map[string]string{"main.sysbox.hcl": strings.Replace(baseLab, `resource "sysbox_node" "watcher" {
  depends_on = [sysbox_network.lan]
}`, "", 1)},
			want: map[string]plans.Action{"sysbox_node.watcher": plans.Delete}, reason: map[string]string{"sysbox_node.watcher": "no longer in the configuration"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := tt.files
			if files == nil {
				files = map[string]string{"main.sysbox.hcl": baseLab}
			}
			tp := topo(t, files, tt.inputs)
			st := tt.prior
			if st == nil {
				st = prior
			}
			p, err := planner().Plan(plans.Request{Topology: tp, Prior: st, Facts: facts(tp, tt.facts)})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range p.Actions {
				want, ok := tt.want[a.Address.String()]
				if !ok {
					want = plans.NoOp
				}
				if a.Action != want {
					t.Errorf("%s: got %s (%s), want %s", a.Address, a.Action, a.Reason, want)
				}
			}
			for addr, sub := range tt.reason {
				if got := find(p, addr).Reason; !strings.Contains(got, sub) {
					t.Errorf("%s reason: got %q, want it to contain %q", addr, got, sub)
				}
			}
		})
	}
}

func TestPlanNodeDiffSaysWhatForcesReplacement(t *testing.T) {
	base := topo(t, map[string]string{"main.sysbox.hcl": baseLab}, nil)
	first, _ := planner().Plan(plans.Request{Topology: base, Prior: &plans.MemoryState{}, Facts: facts(base, nil)})
	tp := topo(t, map[string]string{"main.sysbox.hcl": baseLab}, vars("cpus", "4", "provision", "true"))
	p, err := planner().Plan(plans.Request{Topology: tp, Prior: applied(first, 1), Facts: facts(tp, nil)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]plans.Effect{}
	for _, c := range find(p, "sysbox_node.web[0]").Changes {
		got[c.Path] = c.Effect
	}
	want := map[string]plans.Effect{"cpus": plans.ForcesReplacement, "provisioner": plans.NoEffect}
	if len(got) != len(want) || got["cpus"] != want["cpus"] || got["provisioner"] != want["provisioner"] {
		t.Errorf("changes: got %v, want %v", got, want)
	}
}

func TestPreventDestroy(t *testing.T) {
	src := strings.Replace(baseLab, `resource "sysbox_network" "lan" {
  ipv4_cidr = var.cidr
}`, `resource "sysbox_network" "lan" {
  ipv4_cidr = var.cidr
  lifecycle {
    prevent_destroy = true
  }
}`, 1)
	base := topo(t, map[string]string{"main.sysbox.hcl": src}, nil)
	first, err := planner().Plan(plans.Request{Topology: base, Prior: &plans.MemoryState{}, Facts: facts(base, nil)})
	if err != nil {
		t.Fatal(err)
	}
	tp := topo(t, map[string]string{"main.sysbox.hcl": src}, vars("cidr", "198.51.100.0/25"))
	_, err = planner().Plan(plans.Request{Topology: tp, Prior: applied(first, 1), Facts: facts(tp, nil)})
	var pd *plans.PreventDestroyError
	if !errors.As(err, &pd) || pd.Addr.String() != "sysbox_network.lan" || pd.Action != plans.Replace {
		t.Fatalf("replace: got %v, want PreventDestroyError for sysbox_network.lan replace", err)
	}
	if !strings.Contains(err.Error(), "ipv4_cidr changed") {
		t.Errorf("error %q does not give the reason", err)
	}
	_, err = planner().Plan(plans.Request{Topology: base, Prior: applied(first, 1), Facts: facts(base, nil), Destroy: true})
	if !errors.As(err, &pd) || pd.Action != plans.Delete {
		t.Fatalf("destroy: got %v, want PreventDestroyError delete", err)
	}
}

func TestDestroyOrderIsReversed(t *testing.T) {
	base := topo(t, map[string]string{"main.sysbox.hcl": baseLab}, nil)
	first, _ := planner().Plan(plans.Request{Topology: base, Prior: &plans.MemoryState{}, Facts: facts(base, nil)})
	p, err := planner().Plan(plans.Request{Topology: base, Prior: applied(first, 1), Facts: facts(base, nil), Destroy: true})
	if err != nil {
		t.Fatal(err)
	}
	want := `delete sysbox_firewall.web
delete sysbox_node.watcher
delete sysbox_node.web[0]
delete sysbox_node.web[1]
delete sysbox_artifact.img
delete sysbox_network.lan
`
	if got := summary(p); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestMissingCapabilityFailsPlanning(t *testing.T) {
	tp := topo(t, map[string]string{"main.sysbox.hcl": baseLab}, nil)
	caps := allCaps()
	caps["netns"] = []driver.Capability{driver.CapManagedNetwork, driver.CapNodeLifecycle, driver.CapNodeState, driver.CapArtifact}
	pl := planner()
	pl.Capabilities = caps
	_, err := pl.Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{}, Facts: facts(tp, nil)})
	var mc *driver.MissingCapabilityError
	if !errors.As(err, &mc) || mc.Address != "sysbox_node.web[0]" || mc.Capability != driver.CapNIC {
		t.Fatalf("got %v, want missing nic for sysbox_node.web[0]", err)
	}
}

func TestSchemaVersionMismatchRefused(t *testing.T) {
	base := topo(t, map[string]string{"main.sysbox.hcl": baseLab}, nil)
	first, _ := planner().Plan(plans.Request{Topology: base, Prior: &plans.MemoryState{}, Facts: facts(base, nil)})
	st := applied(first, 1)
	st.Items[1].SchemaVersion = 0
	_, err := planner().Plan(plans.Request{Topology: base, Prior: st, Facts: facts(base, nil)})
	var sv *plans.SchemaVersionError
	if !errors.As(err, &sv) || sv.State != 0 || sv.Current != 1 {
		t.Fatalf("got %v, want SchemaVersionError 0 vs 1", err)
	}
}

func TestTargetLimitsPlan(t *testing.T) {
	tp := topo(t, map[string]string{"main.sysbox.hcl": baseLab}, nil)
	tg, _ := addrs.ParseTarget("sysbox_firewall.web")
	p, err := planner().Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{}, Facts: facts(tp, nil), Targets: []addrs.Target{tg}})
	if err != nil {
		t.Fatal(err)
	}
	want := "create sysbox_artifact.img\ncreate sysbox_network.lan\ncreate sysbox_node.web[0]\ncreate sysbox_node.web[1]\ncreate sysbox_firewall.web\n"
	if got := summary(p); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	none, _ := addrs.ParseTarget("sysbox_node.nothing")
	if _, err := planner().Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{}, Facts: facts(tp, nil), Targets: []addrs.Target{none}}); err == nil {
		t.Error("target matching nothing: got nil error")
	}
}

func TestPinnedDigestMismatchFailsPlan(t *testing.T) {
	src := `resource "sysbox_artifact" "k" {
  kind   = "kernel"
  source = "./vmlinux"
  digest = "sha256:` + strings.Repeat("a", 64) + `"
}`
	tp := topo(t, map[string]string{"main.sysbox.hcl": src}, nil)
	_, err := planner().Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{}, Facts: facts(tp, nil)})
	if !errors.Is(err, driver.ErrDigestMismatch) {
		t.Fatalf("got %v, want ErrDigestMismatch", err)
	}
}

func TestFromStateSeesPublicAttributesAndStatus(t *testing.T) {
	st := states.New()
	st.Lineage, st.Serial = "l-1", 3
	st.Set(&states.Resource{Addr: addrs.MustParseInstance("sysbox_network.lan"), SchemaVersion: 1,
		Attributes:  []byte(`{"driver":"netns","ipv4_cidr":"198.51.100.0/24","mtu":1500}`),
		Observation: states.Observation{Status: substrate.Drifted, Reason: "bridge mtu differs"},
		Private:     &substrate.Envelope{Driver: "netns", Version: 1, Data: []byte(`{"bridge":"private"}`)}})
	ps := plans.FromState(st)
	if ps.Lineage() != "l-1" || ps.Serial() != 3 {
		t.Fatalf("lineage/serial: got %s/%d", ps.Lineage(), ps.Serial())
	}
	rs := ps.Resources()
	if len(rs) != 1 || rs[0].Status != substrate.Drifted || rs[0].StatusReason != "bridge mtu differs" || strings.Contains(string(rs[0].Attributes), "private") {
		t.Errorf("got %+v", rs)
	}
	tp := topo(t, map[string]string{"main.sysbox.hcl": `resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }`}, nil)
	p, err := planner().Plan(plans.Request{Topology: tp, Prior: ps})
	if err != nil {
		t.Fatal(err)
	}
	if a := find(p, "sysbox_network.lan"); a.Action != plans.Replace || !strings.Contains(a.Reason, "bridge mtu differs") {
		t.Errorf("drifted network: got %s (%s), want replace with the observation's reason", a.Action, a.Reason)
	}
}

func TestDataArtifactContentChangeReplacesNode(t *testing.T) {
	src := `
data "sysbox_artifact" "kernel" {
  kind   = "kernel"
  source = "./vmlinux"
}
resource "sysbox_artifact" "root" {
  kind   = "rootfs"
  source = "./rootfs.ext4"
}
resource "sysbox_node" "vm" {
  driver   = "firecracker"
  kernel   = data.sysbox_artifact.kernel
  artifact = sysbox_artifact.root
}`
	pl := planner()
	pl.Capabilities = drivertest.Caps{"docker": {driver.CapArtifact}, "firecracker": {driver.CapNodeLifecycle, driver.CapNodeState}}
	tp := topo(t, map[string]string{"main.sysbox.hcl": src}, nil)
	first, err := pl.Plan(plans.Request{Topology: tp, Prior: &plans.MemoryState{}, Facts: facts(tp, nil)})
	if err != nil {
		t.Fatal(err)
	}
	if a := find(first, "data.sysbox_artifact.kernel"); a.Action != plans.Read {
		t.Errorf("data source: got %s, want read", a.Action)
	}
	newKernel := map[string]string{"data.sysbox_artifact.kernel": "sha256:" + strings.Repeat("c", 64)}
	p, err := pl.Plan(plans.Request{Topology: tp, Prior: applied(first, 1), Facts: facts(tp, newKernel)})
	if err != nil {
		t.Fatal(err)
	}
	vm := find(p, "sysbox_node.vm")
	if vm.Action != plans.Replace || !strings.Contains(vm.Reason, "kernel_digest changed") {
		t.Errorf("node: got %s (%s), want replace because the kernel's content changed", vm.Action, vm.Reason)
	}
	if a := find(p, "sysbox_artifact.root"); a.Action != plans.NoOp {
		t.Errorf("root artifact: got %s, want no-op", a.Action)
	}
}
