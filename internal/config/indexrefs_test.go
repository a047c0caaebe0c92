package config_test

import (
	"fmt"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/config"
)

// depsOf evaluates one main file and returns each instance's dependencies, "ADDR: DEP DEP".
func depsOf(t *testing.T, src string) map[string]string {
	t.Helper()
	dir := write(t, map[string]string{"main.sysbox.hcl": src})
	top, diags := eval(t, dir, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	out := map[string]string{}
	for _, ri := range top.Resources {
		var ds []string
		for _, d := range ri.DependsOn {
			ds = append(ds, d.String())
		}
		out[ri.Addr.String()] = strings.Join(ds, " ")
	}
	return out
}

const threeNets = `
resource "sysbox_network" "lan" {
  count     = 3
  ipv4_cidr = cidrsubnet("198.18.0.0/16", 8, count.index)
}
resource "sysbox_network" "byname" {
  for_each  = { a = 10, b = 11 }
  ipv4_cidr = cidrsubnet("198.18.0.0/16", 8, each.value)
}
`

// TestIndexedReferencesDependOnTheNamedInstances: a resource named only through indexes of
// single instances makes each instance depend on the instances its keys name; any other use
// of the resource makes it a dependency as a whole.
func TestIndexedReferencesDependOnTheNamedInstances(t *testing.T) {
	all := "sysbox_network.lan[0] sysbox_network.lan[1] sysbox_network.lan[2]"
	for _, c := range []struct {
		name, node string
		want       map[string]string // instance → its dependencies
	}{{
		name: "count.index modulo",
		node: `count = 4
  attachment "lan" { network = sysbox_network.lan[count.index % 3] }`,
		want: map[string]string{"sysbox_node.n[0]": "sysbox_network.lan[0]", "sysbox_node.n[1]": "sysbox_network.lan[1]", "sysbox_node.n[3]": "sysbox_network.lan[0]"},
	}, {
		name: "index then attribute, in a template",
		node: `count = 2
  hostname = "h-${replace(sysbox_network.lan[count.index + 1].ipv4_cidr, "/[./]/", "-")}"`,
		want: map[string]string{"sysbox_node.n[0]": "sysbox_network.lan[1]", "sysbox_node.n[1]": "sysbox_network.lan[2]"},
	}, {
		name: "literal index and an index expression together",
		node: `count = 2
  attachment "a" { network = sysbox_network.lan[2] }
  attachment "b" { network = sysbox_network.lan[count.index] }`,
		want: map[string]string{"sysbox_node.n[0]": "sysbox_network.lan[0] sysbox_network.lan[2]", "sysbox_node.n[1]": "sysbox_network.lan[1] sysbox_network.lan[2]"},
	}, {
		name: "for_each key",
		node: `for_each = { x = "a", y = "b" }
  attachment "lan" { network = sysbox_network.byname[each.value] }`,
		want: map[string]string{`sysbox_node.n["x"]`: `sysbox_network.byname["a"]`, `sysbox_node.n["y"]`: `sysbox_network.byname["b"]`},
	}, {
		name: "also named bare",
		node: `count = 2
  hostname = "h${length(sysbox_network.lan)}"
  attachment "lan" { network = sysbox_network.lan[count.index] }`,
		want: map[string]string{"sysbox_node.n[0]": all, "sysbox_node.n[1]": all},
	}, {
		name: "index inside a for expression",
		node: `count = 2
  hostname = join("-", [for i in [0, 1] : sysbox_network.lan[i].ipv4_cidr == "" ? "x" : "y"])
  attachment "lan" { network = sysbox_network.lan[count.index] }`,
		want: map[string]string{"sysbox_node.n[0]": all, "sysbox_node.n[1]": all},
	}, {
		name: "also in depends_on",
		node: `count = 2
  depends_on = [sysbox_network.lan]
  attachment "lan" { network = sysbox_network.lan[count.index] }`,
		want: map[string]string{"sysbox_node.n[0]": all, "sysbox_node.n[1]": all},
	}, {
		name: "also through a local value",
		node: `count = 2
  hostname = local.h
  attachment "lan" { network = sysbox_network.lan[count.index] }`,
		want: map[string]string{"sysbox_node.n[0]": all, "sysbox_node.n[1]": all},
	}, {
		name: "key that names no instance for one of them",
		node: `count = 2
  hostname = count.index == 0 ? "first" : sysbox_network.lan[count.index - 1].ipv4_cidr == "" ? "x" : "y"
  attachment "lan" { network = sysbox_network.lan[2] }`,
		want: map[string]string{"sysbox_node.n[0]": all, "sysbox_node.n[1]": "sysbox_network.lan[0] sysbox_network.lan[2]"},
	}, {
		name: "dynamic block",
		node: `count = 2
  dynamic "attachment" {
    for_each = ["lan"]
    labels   = [attachment.value]
    content { network = sysbox_network.lan[count.index] }
  }`,
		want: map[string]string{"sysbox_node.n[0]": all, "sysbox_node.n[1]": all},
	}} {
		t.Run(c.name, func(t *testing.T) {
			src := threeNets + "locals { h = \"h${length(sysbox_network.lan)}\" }\n" +
				"resource \"sysbox_node\" \"n\" {\n  " + c.node + "\n}\n"
			got := depsOf(t, src)
			for addr, want := range c.want {
				if got[addr] != want {
					t.Errorf("%s depends on [%s], want [%s]", addr, got[addr], want)
				}
			}
		})
	}
}

// TestIndexedReferencesShareEqualLists: instances naming the same instances share one list
// (plans and the graph cache encodings by list).
func TestIndexedReferencesShareEqualLists(t *testing.T) {
	dir := write(t, map[string]string{"main.sysbox.hcl": threeNets + `
resource "sysbox_node" "n" {
  count = 6
  attachment "lan" { network = sysbox_network.lan[count.index % 3] }
}`})
	top, diags := eval(t, dir, config.Options{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	byAddr := map[string]*config.ResourceInstance{}
	for _, ri := range top.Resources {
		byAddr[ri.Addr.String()] = ri
	}
	a, b := byAddr["sysbox_node.n[1]"].DependsOn, byAddr["sysbox_node.n[4]"].DependsOn
	if fmt.Sprint(a) != "[sysbox_network.lan[1]]" || &a[0] != &b[0] {
		t.Errorf("n[1] and n[4]: got %v at %p and %v at %p, want one shared [sysbox_network.lan[1]]", a, &a[0], b, &b[0])
	}
}
