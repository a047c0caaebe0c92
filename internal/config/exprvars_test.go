package config

import (
	"reflect"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// FuzzExprVariables: exprVariables finds what Variables finds, in the same order, for every
// argument of every body (nested blocks included) of the input. Seeds: the cases below, every
// example topology and every diagnostics golden input (go test runs them all).
func FuzzExprVariables(f *testing.F) {
	for _, src := range []string{
		"a = 1\nb = \"x\"\nc = null\n",
		"a = x.y\nb = [x, \"y\", z.w[0], []]\nc = \"${x}-${y.z}\"\n",
		"a = \"%{ if x }${y}%{ endif }\"\nb = \"${x}\"\n",
		"a = [for k in xs : k if k != y]\nb = {for k, v in m : k => v}\nc = [x, [for i in y : i + z]]\n",
		"a = f(x, [y])\nb = x ? [y] : [\"z\"]\nc = -x\nd = x.*.y\ne = (x)\nf = [\"a\", (b)]\n",
		"blk {\n  a = [x.y, [z]]\n  inner \"l\" {\n    b = \"${w}\"\n  }\n}\n",
	} {
		f.Add([]byte(src))
	}
	AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		file, _ := hclsyntax.ParseConfig(src, "f.hcl", hcl.InitialPos)
		if file == nil {
			return
		}
		body, ok := file.Body.(*hclsyntax.Body)
		if !ok {
			return
		}
		var walk func(*hclsyntax.Body)
		walk = func(b *hclsyntax.Body) {
			for name, a := range b.Attributes {
				if got, want := exprVariables(nil, a.Expr), a.Expr.Variables(); !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: exprVariables gives %#v, Variables %#v", name, got, want)
				}
			}
			for _, blk := range b.Blocks {
				walk(blk.Body)
			}
		}
		walk(body)
	})
}
