package config

import (
	"fmt"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// fastDecodes counts the values the fast decoder returned during this test binary's run, and
// attrDecodes the Decodes given the body's attributes instead of its value.
var fastDecodes, attrDecodes atomic.Int64

// Every value the fast decoder returns in this package's tests (the examples, golden and
// diagnostics topologies included) is compared with hcldec's for the same body.
func init() {
	checkFastDecode = func(body hcl.Body, spec hcldec.Spec, ctx *hcl.EvalContext, got cty.Value, clean bool) {
		fastDecodes.Add(1)
		want, d := hcldec.Decode(body, spec, ctx)
		if d.HasErrors() || !want.RawEquals(got) {
			panic(fmt.Sprintf("fast decode of %s: got %#v, hcldec gives %#v (%v)", body.MissingItemRange(), got, want, d))
		}
		if clean && needsScan(got, true) {
			panic(fmt.Sprintf("fast decode of %s: called clean, but %#v needs a scan", body.MissingItemRange(), got))
		}
	}
	checkAttrDecode = func(s Schema, req *DecodeRequest, got *Decoded, diags hcl.Diagnostics) {
		attrDecodes.Add(1)
		full := *req
		full.Value, full.attrs = cty.ObjectVal(req.attrs), nil
		if msg := sameDecode(&full, req, s); msg != "" {
			panic(fmt.Sprintf("%s given its attributes: %s", req.Addr, msg))
		}
		want, wantDiags := s.Decode(&full)
		if msg := sameDecoded(got, diags, want, wantDiags); msg != "" {
			panic(fmt.Sprintf("%s given its attributes: %s", req.Addr, msg))
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
		// list(string) of plain strings is built without converting a tuple (literalStringList)
		{"plain string list", "cpus = 1\ncommand = [\"sleep\", \"infinity\"]\n", true},
		{"empty list", "cpus = 1\ncommand = []\n", true},
		{"plain strings, not a list", "cpus = 1\nartifact = [\"a\", \"b\"]\n", true},
		{"list of a number", "cpus = 1\ncommand = [1]\n", true},
		{"list of null", "cpus = 1\ncommand = [null]\n", true},
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
			got, clean, ok := fs.decode(body, nil, ctxScope{ctx})
			if ok != c.fast {
				t.Fatalf("fast decoder answered %v, want %v (hcldec: %v)", ok, c.fast, wantDiags)
			}
			if ok && (wantDiags.HasErrors() || !got.RawEquals(want)) {
				t.Fatalf("got %#v, hcldec gives %#v (%v)", got, want, wantDiags)
			}
			if ok && clean != !needsScan(want, true) {
				t.Fatalf("clean = %v, but needsScan of hcldec's value is %v", clean, needsScan(want, true))
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

// TestLazyVarsRef: a whole-resource reference read from the scope (lazyVars.ref) is the value
// the traversal has in the assembled evaluation context, or no answer.
func TestLazyVarsRef(t *testing.T) {
	net := func(cidr string) cty.Value {
		return cty.ObjectVal(map[string]cty.Value{"address": cty.StringVal("sysbox_network." + cidr), "ipv4_cidr": cty.StringVal(cidr)})
	}
	trav := func(src string) hcl.Traversal {
		tr, d := hclsyntax.ParseTraversalAbs([]byte(src), "t.hcl", hcl.InitialPos)
		if d.HasErrors() {
			t.Fatal(d)
		}
		return tr
	}
	cases := []struct {
		name    string
		b       scopeBuilder
		tr      string
		answers bool
	}{
		{"one resource", scopeBuilder{full: []fullRef{{"sysbox_network.a", net("a")}}}, "sysbox_network.a", true},
		{"counted resource", scopeBuilder{full: []fullRef{{"sysbox_node.n", cty.TupleVal([]cty.Value{net("x"), net("y")})}}}, "sysbox_node.n", true},
		{"whole over attributes", scopeBuilder{full: []fullRef{{"sysbox_network.a", net("a")}},
			partial: map[string]map[string]cty.Value{"sysbox_network.a": {"ipv4_cidr": cty.StringVal("other")}}}, "sysbox_network.a", true},
		{"last of one name", scopeBuilder{full: []fullRef{{"sysbox_network.a", net("first")}, {"sysbox_network.a", net("last")}}}, "sysbox_network.a", true},
		{"among others", scopeBuilder{full: []fullRef{{"sysbox_network.ab", net("ab")}, {"sysbox_network.a", net("a")}, {"sysbox_networ.ka", net("ka")}}}, "sysbox_network.a", true},
		{"not referenced whole", scopeBuilder{partial: map[string]map[string]cty.Value{"sysbox_network.a": {"ipv4_cidr": cty.StringVal("a")}}}, "sysbox_network.a", false},
		{"other resource", scopeBuilder{full: []fullRef{{"sysbox_network.a", net("a")}}}, "sysbox_network.b", false},
		{"attribute", scopeBuilder{full: []fullRef{{"sysbox_network.a", net("a")}}}, "sysbox_network.a.ipv4_cidr", false},
		{"index", scopeBuilder{full: []fullRef{{"sysbox_network.a", net("a")}}}, "sysbox_network.a[0]", false},
		// KELVIN SIGN is "K" once normalised: the assembled object has one attribute for both
		{"names cty normalises", scopeBuilder{full: []fullRef{{"sysbox_network.K", net("ascii")}, {"sysbox_network.\u212a", net("kelvin")}}}, "sysbox_network.K", false},
		{"partial name cty normalises", scopeBuilder{full: []fullRef{{"sysbox_network.K", net("ascii")}},
			partial: map[string]map[string]cty.Value{"sysbox_network.\u212a": {"ipv4_cidr": cty.StringVal("kelvin")}}}, "sysbox_network.K", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.b
			l := newLazyVars(&b)
			tr := trav(c.tr)
			got, ok := l.ref(tr)
			want, d := tr.TraverseAbs(&hcl.EvalContext{Variables: l.get()})
			if ok != c.answers {
				t.Fatalf("ref answered %v, want %v", ok, c.answers)
			}
			if ok && (d.HasErrors() || !got.RawEquals(want)) {
				t.Fatalf("ref gives %#v, the context gives %#v (%v)", got, want, d)
			}
		})
	}
}

// sameDecode: every attribute Attr finds in the assembled value, the unassembled request
// finds too, and the same; and the other way round (Attr of a name the spec does not have).
func sameDecode(full, req *DecodeRequest, s Schema) string {
	ty := full.Value.Type()
	names := []string{"no_such_attribute", "\u212a"}
	for n := range ty.AttributeTypes() {
		names = append(names, n)
	}
	for _, n := range names {
		w, wok := full.Attr(n)
		g, gok := req.Attr(n)
		if wok != gok || wok && !w.RawEquals(g) {
			return fmt.Sprintf("Attr(%q) = %#v, %v; from the value %#v, %v", n, g, gok, w, wok)
		}
	}
	return ""
}

// sameDecoded compares two Decode results: configuration, references, reference values and
// diagnostics.
func sameDecoded(got *Decoded, gotDiags hcl.Diagnostics, want *Decoded, wantDiags hcl.Diagnostics) string {
	if !reflect.DeepEqual(gotDiags, wantDiags) {
		return fmt.Sprintf("diagnostics %v, from the value %v", gotDiags, wantDiags)
	}
	if (got == nil) != (want == nil) {
		return fmt.Sprintf("result %v, from the value %v", got, want)
	}
	if got == nil {
		return ""
	}
	if !reflect.DeepEqual(got.Config, want.Config) || !reflect.DeepEqual(got.References, want.References) {
		return fmt.Sprintf("%#v %#v, from the value %#v %#v", got.Config, got.References, want.Config, want.References)
	}
	gr, wr := (&ResourceInstance{Ref: got.Ref, refFunc: got.RefFunc}).RefValue(), (&ResourceInstance{Ref: want.Ref, refFunc: want.RefFunc}).RefValue()
	if !gr.RawEquals(wr) {
		return fmt.Sprintf("reference value %#v, from the value %#v", gr, wr)
	}
	if (got.RefAttr == nil) != (want.RefAttr == nil) {
		return "RefAttr set on one side only"
	}
	if got.RefAttr != nil && wr.Type().IsObjectType() {
		for n := range wr.Type().AttributeTypes() {
			g, gok := got.RefAttr(n)
			w, wok := want.RefAttr(n)
			if gok != wok || !g.RawEquals(w) {
				return fmt.Sprintf("RefAttr(%q) = %#v, from the value %#v", n, g, w)
			}
		}
	}
	return ""
}

// AttrDecodes counts, for config_test, the Decodes given the body's attributes.
var AttrDecodes = &attrDecodes
