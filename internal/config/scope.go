package config

import (
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// evalExpr evaluates expr in module instance mi with repetition data r (of kind allowed).
func (e *evaluator) evalExpr(mi *modInst, expr hcl.Expression, r rep, allowed repKind) (cty.Value, []*resSlot, bool) {
	vars, deps, failed := e.scope(mi, expr.Variables(), allowed)
	if failed {
		// the reference's own problem is already reported; evaluating would only repeat it
		return cty.DynamicVal, deps, true
	}
	ctx := &hcl.EvalContext{Variables: withRep(vars, r), Functions: mi.funcs}
	v, d := expr.Value(ctx)
	e.diags = append(e.diags, d...)
	if d.HasErrors() {
		return cty.DynamicVal, deps, true
	}
	return v, deps, failed
}

// withRep adds count.index or each.key/each.value to an evaluation context's variables.
func withRep(vars map[string]cty.Value, r rep) map[string]cty.Value {
	switch r.kind {
	case repCount:
		vars = cloneVars(vars)
		vars["count"] = cty.ObjectVal(map[string]cty.Value{"index": cty.NumberIntVal(int64(r.index))})
	case repEach:
		vars = cloneVars(vars)
		vars["each"] = cty.ObjectVal(map[string]cty.Value{"key": r.key, "value": r.value})
	}
	return vars
}

func cloneVars(m map[string]cty.Value) map[string]cty.Value {
	out := make(map[string]cty.Value, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

func attrName(tr hcl.Traversal, i int) string {
	if len(tr) <= i {
		return ""
	}
	switch s := tr[i].(type) {
	case hcl.TraverseAttr:
		return s.Name
	}
	return ""
}

// scope resolves the references of an expression (or body) in mi into the variables of an
// evaluation context, evaluating what they refer to on demand. It returns the resources the
// values came from.
func (e *evaluator) scope(mi *modInst, travs []hcl.Traversal, allowed repKind) (map[string]cty.Value, []*resSlot, bool) {
	if len(travs) == 0 {
		return nil, nil, false
	}
	var deps []*resSlot
	failed := false
	var vars map[string]map[string]cty.Value
	put := func(root, name string, v cty.Value) {
		if vars == nil {
			vars = map[string]map[string]cty.Value{}
		}
		m := vars[root]
		if m == nil {
			m = map[string]cty.Value{}
			vars[root] = m
		}
		m[name] = v
	}
	var data map[string]map[string]cty.Value
	var partial map[string]map[string]cty.Value // resource key → referenced attributes
	var full map[string]*resSlot                // resources referenced as a whole
	var modFull map[string]cty.Value
	var modPart map[string]map[string]cty.Value
	out := make(map[string]cty.Value, 4)
	for _, tr := range travs {
		root := tr.RootName()
		rng := tr.SourceRange()
		switch root {
		case "var", "local":
			name := attrName(tr, 1)
			if name == "" {
				e.errf(rng.Ptr(), "Invalid reference", "%s must be followed by .NAME", root)
				failed = true
				continue
			}
			var s *valSlot
			if root == "var" {
				if _, ok := mi.mod.Variables[name]; !ok {
					e.errf(rng.Ptr(), "Reference to undeclared input variable", "no variable %q is declared in %s", name, moduleWhere(mi))
					failed = true
					continue
				}
				s = e.variable(mi, name)
			} else {
				if _, ok := mi.mod.Locals[name]; !ok {
					e.errf(rng.Ptr(), "Reference to undeclared local value", "no local value %q is declared in %s", name, moduleWhere(mi))
					failed = true
					continue
				}
				s = e.local(mi, name)
			}
			put(root, name, s.val)
			deps = append(deps, s.deps...)
			failed = failed || s.failed
		case "count":
			if allowed != repCount {
				e.errf(rng.Ptr(), "Reference to count in a non-counted context", "count.index is only available in a resource or module block that sets count")
				failed = true
				continue
			}
			if attrName(tr, 1) != "index" {
				e.errf(rng.Ptr(), "Invalid count attribute", "the only attribute of count is index")
				failed = true
			}
		case "each":
			if allowed != repEach {
				e.errf(rng.Ptr(), "Reference to each in a context without for_each", "each.key and each.value are only available in a resource or module block that sets for_each")
				failed = true
				continue
			}
			if a := attrName(tr, 1); a != "key" && a != "value" {
				e.errf(rng.Ptr(), "Invalid each attribute", "each has only key and value")
				failed = true
			}
		case "path":
			dir := mi.mod.Dir
			abs, _ := filepath.Abs(dir)
			rootAbs, _ := filepath.Abs(e.rootDir)
			out["path"] = cty.ObjectVal(map[string]cty.Value{"module": cty.StringVal(abs), "root": cty.StringVal(rootAbs)})
		case "module":
			name := attrName(tr, 1)
			c, ok := mi.mod.Calls[name]
			if !ok {
				e.errf(rng.Ptr(), "Reference to undeclared module", "no module call %q is declared in %s", name, moduleWhere(mi))
				failed = true
				continue
			}
			cs := e.expandCall(mi, name)
			if cs == nil || cs.failed {
				failed = true
				continue
			}
			outName := attrName(tr, 2)
			if c.Count == nil && c.ForEach == nil && outName != "" {
				if _, ok := c.Child.Outputs[outName]; !ok {
					e.errf(rng.Ptr(), "Unsupported attribute", "module %q has no output %q", name, outName)
					failed = true
					continue
				}
				os := e.output(cs.children[0], outName)
				if modPart == nil {
					modPart = map[string]map[string]cty.Value{}
				}
				if modPart[name] == nil {
					modPart[name] = map[string]cty.Value{}
				}
				modPart[name][outName] = os.val
				deps = append(deps, os.deps...)
				failed = failed || os.failed
				continue
			}
			v, d, f := e.callValue(cs)
			if modFull == nil {
				modFull = map[string]cty.Value{}
			}
			modFull[name] = v
			deps = append(deps, d...)
			failed = failed || f
		case "data":
			typ, name := attrName(tr, 1), attrName(tr, 2)
			key := "data." + typ + "." + name
			if _, ok := mi.mod.Resources[key]; !ok {
				e.errf(rng.Ptr(), "Reference to undeclared data source", "no data %q %q is declared in %s", typ, name, moduleWhere(mi))
				failed = true
				continue
			}
			rs := e.resource(mi, key)
			if data == nil {
				data = map[string]map[string]cty.Value{}
			}
			if data[typ] == nil {
				data[typ] = map[string]cty.Value{}
			}
			data[typ][name] = rs.value()
			deps = append(deps, rs)
			failed = failed || rs.failed
		case "self", "terraform":
			e.errf(rng.Ptr(), "Unsupported reference", "%s is not available in sysbox", root)
			failed = true
		default:
			name := attrName(tr, 1)
			key := root + "." + name
			if _, ok := mi.mod.Resources[key]; !ok {
				e.errf(rng.Ptr(), "Reference to undeclared resource", "no resource %q %q is declared in %s (references are var.*, local.*, module.*, data.*, count.*, each.*, path.* or TYPE.NAME)", root, name, moduleWhere(mi))
				failed = true
				continue
			}
			rs := e.resource(mi, key)
			deps = append(deps, rs)
			failed = failed || rs.failed
			// TYPE.NAME.ATTR on a single-instance resource needs only that attribute
			if attr := attrName(tr, 2); attr != "" && rs.kind == repNone && !rs.failed && len(rs.insts) == 1 && rs.insts[0].refAttr != nil {
				if v, ok := rs.insts[0].refAttr(attr); ok {
					if partial == nil {
						partial = map[string]map[string]cty.Value{}
					}
					if partial[key] == nil {
						partial[key] = map[string]cty.Value{}
					}
					partial[key][attr] = v
					continue
				}
			}
			if full == nil {
				full = map[string]*resSlot{}
			}
			full[key] = rs
		}
	}
	for key, attrs := range partial {
		if _, ok := full[key]; ok {
			continue
		}
		typ, name, _ := strings.Cut(key, ".")
		put(typ, name, cty.ObjectVal(attrs))
	}
	for key, rs := range full {
		typ, name, _ := strings.Cut(key, ".")
		put(typ, name, rs.value())
	}
	for root, m := range vars {
		out[root] = cty.ObjectVal(m)
	}
	if len(data) > 0 {
		d := map[string]cty.Value{}
		for typ, m := range data {
			d[typ] = cty.ObjectVal(m)
		}
		out["data"] = cty.ObjectVal(d)
	}
	if len(modFull)+len(modPart) > 0 {
		m := map[string]cty.Value{}
		for n, parts := range modPart {
			m[n] = cty.ObjectVal(parts)
		}
		for n, v := range modFull {
			m[n] = v
		}
		out["module"] = cty.ObjectVal(m)
	}
	return out, deps, failed
}

func moduleWhere(mi *modInst) string {
	if mi.path.IsRoot() {
		return "the root module"
	}
	return mi.path.String() + " (" + mi.mod.Dir + ")"
}
