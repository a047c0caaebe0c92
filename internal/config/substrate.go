package config

import (
	"math/big"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// DefaultParallelism is the substrate's parallelism when its block does not set one (or there
// is no block).
const DefaultParallelism = 8

// substrate evaluates the substrate block (or returns the defaults: netns and nftables drivers,
// a local backend at .sysbox/state, DefaultParallelism).
func (e *evaluator) substrate(ri *modInst) EvaluatedSubstrate {
	s := e.root.Substrate
	if s == nil {
		return EvaluatedSubstrate{Name: "local", Drivers: []NamedAttrs{{Name: "netns", Attrs: map[string]cty.Value{}}, {Name: "nftables", Attrs: map[string]cty.Value{}}},
			Backend: &NamedAttrs{Name: "local", Attrs: map[string]cty.Value{"path": cty.StringVal(".sysbox/state")}}, Parallelism: DefaultParallelism}
	}
	out := EvaluatedSubstrate{Explicit: true, Name: s.Name, Parallelism: DefaultParallelism}
	evalAttrs := func(attrs hcl.Attributes) map[string]cty.Value {
		m := map[string]cty.Value{}
		for n, a := range attrs {
			for _, tr := range a.Expr.Variables() {
				if tr.RootName() != "var" && tr.RootName() != "local" {
					e.errf(tr.SourceRange().Ptr(), "Invalid reference in substrate", "substrate settings may refer only to var.* and local.*")
				}
			}
			v, _, failed := e.evalExpr(ri, a.Expr, rep{}, repNone)
			if failed {
				continue
			}
			v, marks := v.UnmarkDeep()
			if _, ok := marks[Sensitive]; ok {
				e.errf(a.Expr.Range().Ptr(), "Sensitive value in substrate", "%s comes from a sensitive variable; use env(\"NAME\") for secrets", n)
				continue
			}
			m[n] = v
		}
		return m
	}
	for _, d := range s.Drivers {
		out.Drivers = append(out.Drivers, NamedAttrs{Name: d.Label, Attrs: evalAttrs(d.Attrs)})
	}
	if s.Backend != nil {
		out.Backend = &NamedAttrs{Name: s.Backend.Label, Attrs: evalAttrs(s.Backend.Attrs)}
	} else {
		out.Backend = &NamedAttrs{Name: "local", Attrs: map[string]cty.Value{"path": cty.StringVal(".sysbox/state")}}
	}
	if s.Parallelism != nil {
		v, _, failed := e.evalExpr(ri, s.Parallelism, rep{}, repNone)
		if !failed {
			v, _ = v.Unmark()
			n, err := convert.Convert(v, cty.Number)
			var i int64
			acc := big.Exact
			if err == nil && n.IsKnown() && !n.IsNull() {
				i, acc = n.AsBigFloat().Int64()
			}
			if err != nil || !n.IsKnown() || n.IsNull() || acc != big.Exact || i < 1 || i > 1024 {
				e.errf(s.Parallelism.Range().Ptr(), "Invalid parallelism", "parallelism must be a whole number from 1 to 1024")
			} else {
				out.Parallelism, out.ParallelismSet = int(i), true
			}
		}
	}
	return out
}
