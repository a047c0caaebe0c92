package config_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"weak"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/handlers"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func eval(t *testing.T, dir string, opts config.Options) (*config.Topology, hcl.Diagnostics) {
	t.Helper()
	m, src, diags := config.Load(dir)
	if m == nil {
		return nil, diags
	}
	if opts.Schemas == nil {
		opts.Schemas = handlers.Builtin("docker", "netns") // the node drivers sysbox registers
	}
	top, d := config.Evaluate(m, src, opts)
	return top, append(diags, d...)
}

// formatDiags renders diagnostics one per line, with paths relative to base, sorted.
func formatDiags(base string, ds hcl.Diagnostics) string {
	var lines []string
	for _, d := range ds {
		where := "(no range)"
		if d.Subject != nil {
			rel, err := filepath.Rel(base, d.Subject.Filename)
			if err != nil {
				rel = d.Subject.Filename
			}
			where = fmt.Sprintf("%s:%d:%d", filepath.ToSlash(rel), d.Subject.Start.Line, d.Subject.Start.Column)
		}
		lines = append(lines, fmt.Sprintf("%s: %s: %s", where, d.Summary, d.Detail))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// TestDiagnosticsGolden evaluates each testdata/diags/CASE and compares every diagnostic
// (validate reports all at once) with CASE/want.txt. go test -update rewrites them.
func TestDiagnosticsGolden(t *testing.T) {
	cases, err := os.ReadDir("testdata/diags")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name(), func(t *testing.T) {
			dir := filepath.Join("testdata/diags", c.Name())
			_, diags := eval(t, dir, config.Options{})
			if !diags.HasErrors() {
				t.Fatalf("got no errors, want some")
			}
			got := formatDiags(dir, diags)
			golden := filepath.Join(dir, "want.txt")
			if *update {
				os.WriteFile(golden, []byte(got), 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("diagnostics differ (-want +got):\n%s", diff)
			}
		})
	}
}

func write(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, b := range files {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func addrsOf(top *config.Topology) []string {
	var out []string
	for _, r := range top.Resources {
		out = append(out, r.Addr.String())
	}
	return out
}

func TestModulesForEachAndCountAddresses(t *testing.T) {
	top, diags := eval(t, "../../examples/modules-foreach", config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := []string{
		`sysbox_node.jump`,
		`module.segment["blue"].sysbox_firewall.target[0]`,
		`module.segment["blue"].sysbox_network.net`,
		`module.segment["blue"].sysbox_node.target[0]`,
		`module.segment["red"].sysbox_firewall.target[0]`,
		`module.segment["red"].sysbox_firewall.target[1]`,
		`module.segment["red"].sysbox_network.net`,
		`module.segment["red"].sysbox_node.target[0]`,
		`module.segment["red"].sysbox_node.target[1]`,
	}
	if diff := cmp.Diff(want, addrsOf(top)); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	jump := top.Resources[0]
	deps := fmt.Sprint(jump.DependsOn)
	for _, d := range []string{`module.segment["red"].sysbox_network.net`, `module.segment["blue"].sysbox_network.net`} {
		if !strings.Contains(deps, d) {
			t.Errorf("jump depends on %s, want it to include %s", deps, d)
		}
	}
	out := top.Outputs[0]
	if got := out.Value.GetAttr("red").Index(cty.NumberIntVal(1)).AsString(); got != "198.18.1.11/24" {
		t.Errorf("output targets.red[1]: got %s, want 198.18.1.11/24", got)
	}
}

func TestVariablePrecedenceAndTypes(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": `
variable "n" {
  type    = number
  default = 1
}
variable "names" {
  type    = list(string)
  default = []
}
resource "sysbox_node" "x" {
  count = var.n
  hostname = length(var.names) > 0 ? var.names[count.index] : "h${count.index}"
}`})
	vars := func(m map[string]config.InputValue) []string {
		top, diags := eval(t, dir, config.Options{Inputs: m})
		if diags.HasErrors() {
			t.Fatal(diags)
		}
		return addrsOf(top)
	}
	if got := vars(nil); len(got) != 1 {
		t.Errorf("default: got %v, want 1 instance", got)
	}
	env := config.EnvInputs([]string{"SYSBOX_VAR_n=3", "OTHER=1"})
	if got := vars(env); len(got) != 3 {
		t.Errorf("SYSBOX_VAR_n=3: got %v, want 3 instances", got)
	}
	_, flagVal, err := config.ParseVarFlag("n=2")
	if err != nil {
		t.Fatal(err)
	}
	env["n"] = flagVal // -var overrides the environment (the CLI applies this order)
	if got := vars(env); len(got) != 2 {
		t.Errorf("-var n=2: got %v, want 2 instances", got)
	}
	_, list, _ := config.ParseVarFlag(`names=["a","b"]`)
	top, diags := eval(t, dir, config.Options{Inputs: map[string]config.InputValue{"n": flagVal, "names": list}})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if h := top.Resources[1].Config.(handlers.NodeConfig).Hostname; h != "b" {
		t.Errorf("hostname from list var: got %q, want b", h)
	}
	_, bad, _ := config.ParseVarFlag("n=abc")
	if _, diags := eval(t, dir, config.Options{Inputs: map[string]config.InputValue{"n": bad}}); !diags.HasErrors() || !strings.Contains(diags.Error(), "-var n") {
		t.Errorf("-var n=abc: got %v, want an error naming -var n", diags)
	}
	vf := filepath.Join(t.TempDir(), "x.sysbox.vars.hcl")
	os.WriteFile(vf, []byte("n = 4\nnames = [\"p\", \"q\", \"r\", \"s\"]\n"), 0o644)
	in, _, d := config.LoadVarFile(vf)
	if d.HasErrors() {
		t.Fatal(d)
	}
	if got := vars(in); len(got) != 4 {
		t.Errorf("var file n=4: got %v", got)
	}
}

func TestFunctions(t *testing.T) {
	dir := write(t, map[string]string{
		"main.sysbox.hcl": `
locals {
  net = "198.51.100.0/24"
}
resource "sysbox_node" "x" {
  hostname = trimspace(file("name.txt"))
  command  = [cidrhost(local.net, 5), cidrsubnet(local.net, 4, 2), cidrnetmask(local.net), format("%03d", 7), upper(join("-", ["a","b"]))]
  environment = {
    SECRET   = env("LAB_SECRET")
    OPTIONAL = coalesce(env_optional("LAB_OPTIONAL"), "unset")
    HOME2    = coalesce(env_optional("LAB_HOME"), "unset")
  }
}`,
		"name.txt": "web01\n",
	})
	env := map[string]string{"LAB_SECRET": "value-never-read", "LAB_HOME": "/home/lab"}
	top, diags := eval(t, dir, config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	c := top.Resources[0].Config.(handlers.NodeConfig)
	if c.Hostname != "web01" {
		t.Errorf("file(): got %q, want web01", c.Hostname)
	}
	want := []string{"198.51.100.5", "198.51.100.32/28", "255.255.255.0", "007", "A-B"}
	if diff := cmp.Diff(want, c.Command); diff != "" {
		t.Errorf("functions (-want +got):\n%s", diff)
	}
	if c.Environment["SECRET"] != "secret://env/LAB_SECRET" {
		t.Errorf("env(): got %q, want the reference secret://env/LAB_SECRET", c.Environment["SECRET"])
	}
	if c.Environment["OPTIONAL"] != "unset" || c.Environment["HOME2"] != "/home/lab" {
		t.Errorf("env_optional: got %v", c.Environment)
	}
	if len(top.SecretRefs) != 1 || top.SecretRefs[0].Name != "LAB_SECRET" {
		t.Errorf("SecretRefs: got %v", top.SecretRefs)
	}
	if _, ok := top.EnvRead["LAB_SECRET"]; ok {
		t.Error("env() read the secret's value")
	}
	d1 := top.InputDigest()
	env["LAB_HOME"] = "/home/other"
	top2, _ := eval(t, dir, config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if top2.InputDigest() == d1 {
		t.Error("input digest ignores env_optional values")
	}
	env["LAB_SECRET"] = "another-value"
	env["LAB_HOME"] = "/home/lab"
	top3, _ := eval(t, dir, config.Options{LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	if top3.InputDigest() != d1 {
		t.Error("input digest depends on a secret's value")
	}
}

func TestSourcesDigestCoversEveryModuleFile(t *testing.T) {
	dir := write(t, map[string]string{
		"main.sysbox.hcl": `module "m" { source = "./m" }`,
		"m/m.sysbox.hcl":  `resource "sysbox_network" "n" { ipv4_cidr = "198.51.100.0/24" }`,
		"m/ignored.txt":   "not a topology file",
	})
	_, src, diags := config.Load(dir)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	d1 := src.Digest()
	os.WriteFile(filepath.Join(dir, "m/ignored.txt"), []byte("changed"), 0o644)
	if _, src2, _ := config.Load(dir); src2.Digest() != d1 {
		t.Error("digest changed with a non-topology file")
	}
	os.WriteFile(filepath.Join(dir, "m/m.sysbox.hcl"), []byte(`resource "sysbox_network" "n" { ipv4_cidr = "198.51.100.0/25" }`), 0o644)
	if _, src3, _ := config.Load(dir); src3.Digest() == d1 {
		t.Error("digest did not change with a module file")
	}
}

func TestNestedModulesCountAndModuleDependsOn(t *testing.T) {
	dir := write(t, map[string]string{
		"main.sysbox.hcl": `
module "a" {
  source = "./a"
  count  = 2
  base   = count.index
}
resource "sysbox_node" "after" {
  depends_on = [module.a]
  hostname   = "n${length(module.a)}-${module.a[1].cidr == "198.18.1.0/24" ? "ok" : "bad"}"
}`,
		"a/a.sysbox.hcl": `
variable "base" { type = number }
module "b" {
  source = "../b"
  cidr   = cidrsubnet("198.18.0.0/16", 8, var.base)
}
output "cidr" { value = module.b.cidr }`,
		"b/b.sysbox.hcl": `
variable "cidr" { type = string }
resource "sysbox_network" "n" { ipv4_cidr = var.cidr }
output "cidr" { value = sysbox_network.n.ipv4_cidr }`,
	})
	top, diags := eval(t, dir, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := []string{
		"sysbox_node.after",
		"module.a[0].module.b.sysbox_network.n",
		"module.a[1].module.b.sysbox_network.n",
	}
	if diff := cmp.Diff(want, addrsOf(top)); diff != "" {
		t.Errorf("addresses (-want +got):\n%s", diff)
	}
	after := top.Resources[0]
	if h := after.Config.(handlers.NodeConfig).Hostname; h != "n2-ok" {
		t.Errorf("hostname from nested module outputs: got %q, want n2-ok", h)
	}
	if got := fmt.Sprint(after.DependsOn); got != "[module.a[0].module.b.sysbox_network.n module.a[1].module.b.sysbox_network.n]" {
		t.Errorf("depends_on = [module.a]: got %s", got)
	}
}

func TestModuleCallingItselfIsRejected(t *testing.T) {
	dir := write(t, map[string]string{
		"main.sysbox.hcl": `module "loop" { source = "./m" }`,
		"m/m.sysbox.hcl":  `module "again" { source = "../m" }`,
	})
	_, diags := eval(t, dir, config.Options{})
	if !diags.HasErrors() || !strings.Contains(diags.Error(), "Module calls itself") {
		t.Errorf("got %v, want a module recursion error", diags)
	}
}

func TestResourceAttributeReferences(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": `
resource "sysbox_node" "a" { hostname = "alpha" }
resource "sysbox_node" "b" {
  hostname = "${sysbox_node.a.hostname}-b"
  command  = [sysbox_node.a.address, sysbox_node.a.driver]
}
resource "sysbox_node" "c" { hostname = sysbox_node.a.nope }`})
	top, diags := eval(t, dir, config.Options{})
	if !diags.HasErrors() || !strings.Contains(diags.Error(), "nope") {
		t.Fatalf("unknown attribute: got %v, want an error naming nope", diags)
	}
	var b handlers.NodeConfig
	for _, r := range top.Resources {
		if r.Addr.String() == "sysbox_node.b" {
			b = r.Config.(handlers.NodeConfig)
		}
	}
	if b.Hostname != "alpha-b" || !cmp.Equal(b.Command, []string{"sysbox_node.a", "netns"}) {
		t.Errorf("got hostname %q command %v", b.Hostname, b.Command)
	}
}

func TestUndeclaredInputs(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": `variable "a" { default = "x" }`})
	_, diags := eval(t, dir, config.Options{Inputs: config.EnvInputs([]string{"SYSBOX_VAR_other=1"})})
	if diags.HasErrors() || len(diags) != 1 || diags[0].Severity != hcl.DiagWarning {
		t.Errorf("undeclared SYSBOX_VAR_other: got %v, want one warning", diags)
	}
	_, v, _ := config.ParseVarFlag("other=1")
	_, diags = eval(t, dir, config.Options{Inputs: map[string]config.InputValue{"other": v}})
	if !diags.HasErrors() || !strings.Contains(diags.Error(), `-var other sets variable "other"`) {
		t.Errorf("undeclared -var: got %v, want an error", diags)
	}
}

func TestValidateOnlyWithoutVariableValues(t *testing.T) {
	dir := write(t, map[string]string{
		"main.sysbox.hcl": `
variable "segments" { type = map(string) }
variable "cidr" {
  type = string
  validation {
    condition     = can(cidrhost(var.cidr, 0))
    error_message = "cidr must be a prefix."
  }
}
resource "sysbox_network" "n" { ipv4_cidr = var.cidr }
resource "sysbox_node" "per" {
  for_each = var.segments
  attachment "lan" { network = sysbox_network.n }
}
resource "sysbox_node" "fixed" { hostname = "ok" }
module "m" {
  source = "./m"
  cidr   = var.cidr
}
output "o" { value = var.cidr }`,
		"m/m.sysbox.hcl": `
variable "cidr" { type = string }
resource "sysbox_network" "x" { ipv4_cidr = var.cidr }`,
	})
	top, diags := eval(t, dir, config.Options{ValidateOnly: true})
	if diags.HasErrors() {
		t.Fatalf("validate without values: %v", diags)
	}
	if len(diags) != 2 {
		t.Errorf("got %d diagnostics, want one warning per unset variable: %v", len(diags), diags)
	}
	if got := addrsOf(top); !slices.Contains(got, "sysbox_node.fixed") {
		t.Errorf("resources independent of the variables are still checked: got %v", got)
	}
	if _, diags := eval(t, dir, config.Options{}); !diags.HasErrors() {
		t.Error("plan mode without values: got no error")
	}
}

// The dependency graph evaluation builds for its cycle check (depends_on present) is offered to
// the planner with its order, and withdrawn once Resources no longer match it.
func TestDependencyGraphOfferedOnlyWhileResourcesMatch(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": `
resource "sysbox_network" "lan" { ipv4_cidr = "198.18.0.0/24" }
resource "sysbox_node" "b" {
  depends_on = [sysbox_node.a]
  attachment "lan" { network = sysbox_network.lan }
}
resource "sysbox_node" "a" {}
`})
	top, diags := eval(t, dir, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	g, order, ok := top.DependencyGraph()
	if !ok {
		t.Fatal("no dependency graph offered for a configuration with depends_on")
	}
	if got, want := fmt.Sprint(order), "[sysbox_network.lan sysbox_node.a sysbox_node.b]"; got != want {
		t.Errorf("order: got %s, want %s", got, want)
	}
	if got := fmt.Sprint(g.DependenciesOf(top.Resources[2].Addr)); got != "[sysbox_network.lan sysbox_node.a]" {
		t.Errorf("dependencies of %s: got %s", top.Resources[2].Addr, got)
	}
	top.Resources = top.Resources[:2]
	if _, _, ok := top.DependencyGraph(); ok {
		t.Error("dependency graph still offered after Resources changed")
	}

	plain := write(t, map[string]string{"main.sysbox.hcl": `resource "sysbox_node" "a" {}`})
	top, diags = eval(t, plain, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if _, _, ok := top.DependencyGraph(); ok {
		t.Error("dependency graph offered without depends_on (none is built)")
	}
}

// TestReleaseModulesLetsTheModuleTreeGo: after ReleaseModules, nothing the topology holds
// keeps the module tree (every file's syntax tree) reachable, and the instances still have
// what planning reads.
func TestReleaseModulesLetsTheModuleTreeGo(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": `
resource "sysbox_network" "lan" { ipv4_cidr = "198.18.0.0/24" }
resource "sysbox_node" "b" {
  depends_on = [sysbox_node.a]
  attachment "lan" { network = sysbox_network.lan }
}
resource "sysbox_node" "a" {
  count   = 2
  command = ["sleep", "${count.index}"]
}
`})
	top, diags := eval(t, dir, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	describe := func() string { return describeTopology(top) }
	before := describe()
	tree := weak.Make(top.Root)
	top.ReleaseModules()
	runtime.GC()
	runtime.GC()
	if tree.Value() != nil {
		t.Error("the module tree is still reachable after ReleaseModules")
	}
	if top.Root != nil {
		t.Error("Root is still set after ReleaseModules")
	}
	if diff := cmp.Diff(before, describe()); diff != "" {
		t.Errorf("instances changed (-before +after):\n%s", diff)
	}
	if _, _, ok := top.DependencyGraph(); !ok {
		t.Error("dependency graph no longer offered")
	}
}

// describeTopology renders what planning reads of a topology: instances (address,
// dependencies, configuration, reference value) and outputs.
func describeTopology(top *config.Topology) string {
	var b strings.Builder
	for _, ri := range top.Resources {
		cfg, err := json.Marshal(ri.Config)
		fmt.Fprintf(&b, "%s deps %v config %s %v ref %s\n", ri.Addr, ri.DependsOn, cfg, err, ri.RefValue().GoString())
	}
	for _, o := range top.Outputs {
		fmt.Fprintf(&b, "output %s = %s\n", o.Name, o.Value.GoString())
	}
	return b.String()
}

// TestReleaseBodiesLetsDecodedBodiesGo: with Options.ReleaseBodies, the body of a resource
// nothing refers to is unreachable once evaluated (a referenced one is kept), and the result
// is the same as without.
func TestReleaseBodiesLetsDecodedBodiesGo(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": `
resource "sysbox_network" "lan" { ipv4_cidr = "198.18.0.0/24" }
resource "sysbox_node" "b" {
  depends_on = [sysbox_node.a]
  attachment "lan" { network = sysbox_network.lan }
}
resource "sysbox_node" "a" {
  count   = 2
  command = ["sleep", "${count.index}"]
}
output "lan" { value = sysbox_network.lan.ipv4_cidr }
`})
	want, diags := eval(t, dir, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	m, src, diags := config.Load(dir)
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	bodies := map[string]weak.Pointer[hclsyntax.Body]{}
	for key, r := range m.Resources {
		bodies[key] = weak.Make(r.Body.(*hclsyntax.Body))
	}
	top, diags := config.Evaluate(m, src, config.Options{Schemas: handlers.Builtin("docker", "netns"), ReleaseBodies: true})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	runtime.GC()
	runtime.GC()
	for key, kept := range map[string]bool{"sysbox_network.lan": true, "sysbox_node.a": false, "sysbox_node.b": false} {
		if got := bodies[key].Value() != nil; got != kept {
			t.Errorf("%s: body reachable %v, want %v", key, got, kept)
		}
	}
	if diff := cmp.Diff(describeTopology(want), describeTopology(top)); diff != "" {
		t.Errorf("with ReleaseBodies (-without +with):\n%s", diff)
	}
	runtime.KeepAlive(m)
}

// TestSubstrateParallelismSetOnlyWhenWritten: parallelism is 8 unless the block sets it, and
// only a written value counts as the user's choice (it bounds every driver then).
func TestSubstrateParallelismSetOnlyWhenWritten(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      int
		set       bool
	}{
		{"no substrate block", ``, 8, false},
		{"block without parallelism", `substrate "local" {
  driver "netns" {}
}`, 8, false},
		{"parallelism 8 written", `substrate "local" {
  driver "netns" {}
  parallelism = 8
}`, 8, true},
		{"parallelism 3", `substrate "local" {
  driver "netns" {}
  parallelism = 3
}`, 3, true},
	} {
		dir := write(t, map[string]string{"main.sysbox.hcl": tc.src})
		top, diags := eval(t, dir, config.Options{})
		if diags.HasErrors() || top == nil {
			t.Fatalf("%s: %v", tc.name, diags)
		}
		if got := top.Substrate; got.Parallelism != tc.want || got.ParallelismSet != tc.set {
			t.Errorf("%s: got parallelism %d set %v, want %d set %v", tc.name, got.Parallelism, got.ParallelismSet, tc.want, tc.set)
		}
	}
}

// TestNodeDecodedFromAttributes: a node (handlers.Node is an AttrReader) whose body needs no
// scan is decoded from its attributes, not an assembled object; the test hook compares that
// Decode with one of the assembled value (fastdecode_test.go). A node with a marked value (a
// secret reference: the scan finds its path) is decoded from its value.
func TestNodeDecodedFromAttributes(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": `
resource "sysbox_network" "lan" { ipv4_cidr = "198.51.100.0/24" }
resource "sysbox_node" "a" {
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.2/24"]
  }
  route {
    to  = "default"
    via = "198.51.100.1"
  }
}
resource "sysbox_node" "b" {
  environment = { TOKEN = env("TOKEN") }
}
`})
	before := config.AttrDecodes.Load()
	top, diags := eval(t, dir, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if n := config.AttrDecodes.Load() - before; n != 1 {
		t.Fatalf("%d decodes from attributes, want 1 (node a; b holds a secret reference)", n)
	}
	if len(top.Resources) != 3 {
		t.Fatalf("got %d resources", len(top.Resources))
	}
}

// TestMissingArgumentsInOneOrder: hcldec reports a body's missing arguments in the order it
// meets them in its spec, a map; validate reports them in one order every time (the input
// FuzzLoadEvaluate found: two runs gave "kind" and "source" in either order).
func TestMissingArgumentsInOneOrder(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": "resource \"sysbox_artifact\" \"a\" {\n}\n"})
	var first string
	for i := 0; i < 20; i++ {
		_, diags := eval(t, dir, config.Options{ValidateOnly: true})
		var got string
		for _, d := range diags {
			got += d.Error() + "\n"
		}
		if i == 0 {
			first = got
			if !strings.Contains(got, `"kind"`) || !strings.Contains(got, `"source"`) || strings.Index(got, `"kind"`) > strings.Index(got, `"source"`) {
				t.Fatalf("got %s, want the missing kind, then source", got)
			}
		} else if got != first {
			t.Fatalf("run %d: got %s, first run %s", i, got, first)
		}
	}
}
