package config

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// fastDecodes counts the values the fast decoder returned during this test binary's run.
var fastDecodes atomic.Int64

// Every value the fast decoder returns in this package's tests (the examples, golden and
// diagnostics topologies included) is compared with hcldec's for the same body.
func init() {
	checkFastDecode = func(body hcl.Body, spec hcldec.Spec, ctx *hcl.EvalContext, got cty.Value) {
		fastDecodes.Add(1)
		want, d := hcldec.Decode(body, spec, ctx)
		if d.HasErrors() || !want.RawEquals(got) {
			panic(fmt.Sprintf("fast decode of %s: got %#v, hcldec gives %#v (%v)", body.MissingItemRange(), got, want, d))
		}
	}
}

var fastTestSpec = hcldec.ObjectSpec{
	"driver":  &hcldec.AttrSpec{Name: "driver", Type: cty.String},
	"art":     &hcldec.AttrSpec{Name: "artifact", Type: cty.DynamicPseudoType},
	"cpus":    &hcldec.AttrSpec{Name: "cpus", Type: cty.Number, Required: true},
	"command": &hcldec.AttrSpec{Name: "command", Type: cty.List(cty.String)},
	"env":     &hcldec.AttrSpec{Name: "environment", Type: cty.Map(cty.String)},
	"attachment": &hcldec.BlockObjectSpec{TypeName: "attachment", LabelNames: []string{"name"}, Nested: hcldec.ObjectSpec{
		"network": &hcldec.AttrSpec{Name: "network", Type: cty.DynamicPseudoType, Required: true},
		"ipv4":    &hcldec.AttrSpec{Name: "ipv4", Type: cty.List(cty.String)},
	}},
	"route": &hcldec.BlockListSpec{TypeName: "route", MaxItems: 2, Nested: hcldec.ObjectSpec{
		"to":  &hcldec.AttrSpec{Name: "to", Type: cty.String, Required: true},
		"via": &hcldec.AttrSpec{Name: "via", Type: cty.String},
	}},
	"prov": &hcldec.BlockListSpec{TypeName: "provisioner", Nested: hcldec.ObjectSpec{
		"type":    &hcldec.BlockLabelSpec{Index: 0, Name: "type"},
		"command": &hcldec.AttrSpec{Name: "command", Type: cty.List(cty.String), Required: true},
	}},
	"any": &hcldec.BlockListSpec{TypeName: "any", Nested: hcldec.ObjectSpec{
		"v": &hcldec.AttrSpec{Name: "v", Type: cty.DynamicPseudoType},
	}},
}

// TestFastDecode decodes resource bodies both ways: where the fast decoder answers, its value
// must be hcldec's; where hcldec reports a problem, the fast decoder must not answer.
func TestFastDecode(t *testing.T) {
	fs := compileFast(fastTestSpec, true)
	if fs == nil {
		t.Fatal("the test spec is not covered")
	}
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"net": cty.ObjectVal(map[string]cty.Value{"id": cty.StringVal("n1")}),
			"later": cty.UnknownVal(cty.String), "secret": cty.StringVal("s").Mark(Sensitive)},
		Functions: map[string]function.Function{"upper": stdlib.UpperFunc},
	}
	cases := []struct {
		name, src string
		fast      bool
	}{
		{"minimal", "cpus = 1\n", true},
		{"all", "driver = \"netns\"\ncpus = \"2\"\nartifact = net\ncommand = [\"a\", upper(\"b\")]\nenvironment = {A = \"x\"}\n" +
			"attachment \"lan\" {\n network = net\n ipv4 = [\"192.0.2.1\"]\n}\nattachment \"wan\" {\n network = net.id\n}\n" +
			"route {\n to = \"0.0.0.0/0\"\n via = \"192.0.2.254\"\n}\nroute {\n to = \"198.51.100.0/24\"\n}\n" +
			"provisioner \"exec\" {\n command = [\"x\"]\n}\n", true},
		// the same argument types as "all": its conversions are reused (fastAttr.convert)
		{"conversions reused", "cpus = \"3\"\ncommand = [\"c\", upper(\"d\")]\n", true},
		{"conversion reused, value refused", "cpus = \"three\"\n", false},
		{"meta arguments hidden", "count = 3\ndepends_on = [x]\ncpus = 1\nlifecycle {\n prevent_destroy = true\n}\n", true},
		{"unknown and marked", "cpus = 1\ndriver = later\ncommand = [secret]\n", true},
		{"dynamic list elements", "cpus = 1\nany {\n v = 1\n}\nany {\n v = \"x\"\n}\n", false},
		{"missing required", "driver = \"x\"\n", false},
		{"unsupported argument", "cpus = 1\ncolour = \"red\"\n", false},
		{"unsupported block", "cpus = 1\nwidget {\n}\n", false},
		{"argument as block", "cpus = 1\ndriver {\n}\n", false},
		{"block as argument", "cpus = 1\nroute = []\n", false},
		{"lifecycle as argument", "cpus = 1\nlifecycle = 1\n", false},
		{"wrong type", "cpus = \"many\"\n", false},
		{"unknown variable", "cpus = nope\n", false},
		{"label missing", "cpus = 1\nattachment {\n network = net\n}\n", false},
		{"extra label", "cpus = 1\nroute \"x\" {\n to = \"a\"\n}\n", false},
		{"duplicate key", "cpus = 1\nattachment \"a\" {\n network = net\n}\nattachment \"a\" {\n network = net\n}\n", false},
		{"too many", "cpus = 1\nroute {\n to = \"a\"\n}\nroute {\n to = \"b\"\n}\nroute {\n to = \"c\"\n}\n", false},
		{"nested missing required", "cpus = 1\nroute {\n via = \"a\"\n}\n", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, d := hclsyntax.ParseConfig([]byte(c.src), "t.hcl", hcl.InitialPos)
			if d.HasErrors() {
				t.Fatal(d)
			}
			_, body, d := f.Body.PartialContent(resourceMeta)
			if d.HasErrors() {
				t.Fatal(d)
			}
			want, wantDiags := hcldec.Decode(body, fastTestSpec, ctx)
			got, ok := fs.decode(body, nil, ctx)
			if ok != c.fast {
				t.Fatalf("fast decoder answered %v, want %v (hcldec: %v)", ok, c.fast, wantDiags)
			}
			if ok && (wantDiags.HasErrors() || !got.RawEquals(want)) {
				t.Fatalf("got %#v, hcldec gives %#v (%v)", got, want, wantDiags)
			}
			if !ok && !wantDiags.HasErrors() && c.name != "dynamic list elements" {
				t.Fatalf("fast decoder declined a body hcldec accepts")
			}
		})
	}
}

// TestCompileFast: specs with parts the fast decoder does not cover get none.
func TestCompileFast(t *testing.T) {
	for name, spec := range map[string]hcldec.Spec{
		"not an object":       &hcldec.AttrSpec{Name: "a", Type: cty.String},
		"block map":           hcldec.ObjectSpec{"b": &hcldec.BlockMapSpec{TypeName: "b", LabelNames: []string{"x"}, Nested: hcldec.ObjectSpec{}}},
		"two labels":          hcldec.ObjectSpec{"b": &hcldec.BlockObjectSpec{TypeName: "b", LabelNames: []string{"x", "y"}, Nested: hcldec.ObjectSpec{}}},
		"meta argument name":  hcldec.ObjectSpec{"c": &hcldec.AttrSpec{Name: "count", Type: cty.Number}},
		"attribute and block": hcldec.ObjectSpec{"a": &hcldec.AttrSpec{Name: "b", Type: cty.String}, "b": &hcldec.BlockListSpec{TypeName: "b", Nested: hcldec.ObjectSpec{}}},
		"default":             hcldec.ObjectSpec{"d": &hcldec.DefaultSpec{Primary: &hcldec.AttrSpec{Name: "d", Type: cty.String}, Default: &hcldec.LiteralSpec{Value: cty.StringVal("x")}}},
	} {
		if compileFast(spec, true) != nil {
			t.Errorf("%s: compiled, want no fast decoder", name)
		}
	}
}
