package config

import (
	"path/filepath"
	"strings"
	"sync"

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

// scopeBuilder collects the variables of one evaluation context while scope resolves an
// expression's references, one method per kind of reference.
type scopeBuilder struct {
	e       *evaluator
	mi      *modInst
	deps    []*resSlot
	failed  bool
	vars    map[string]map[string]cty.Value // var, local, and TYPE → NAME → value
	data    map[string]map[string]cty.Value // data TYPE → NAME → value
	partial map[string]map[string]cty.Value // resource key → referenced attributes
	full    []fullRef                       // resources referenced as a whole, with their values
	modFull map[string]cty.Value
	modPart map[string]map[string]cty.Value
	out     map[string]cty.Value
	// indirect are the deps that came through a variable, local value or module output, not
	// from a resource the expressions name themselves (see indexRefs)
	indirect []*resSlot
}

// scope resolves the references of an expression (or body) in mi into the variables of an
// evaluation context, evaluating what they refer to on demand. It returns the resources the
// values came from.
func (e *evaluator) scope(mi *modInst, travs []hcl.Traversal, allowed repKind) (map[string]cty.Value, []*resSlot, bool) {
	b := e.resolve(mi, travs, allowed)
	if b == nil {
		return nil, nil, false
	}
	return b.finish(), b.deps, b.failed
}

// resolve is scope without assembling the variables (nil when there are no references):
// its deps and failed are final, and finish assembles the variables from values resolve
// computed, touching nothing else of the evaluator, so that it may run later on another
// goroutine (a deferred decode job: lazyVars).
func (e *evaluator) resolve(mi *modInst, travs []hcl.Traversal, allowed repKind) *scopeBuilder {
	if len(travs) == 0 {
		return nil
	}
	b := &scopeBuilder{e: e, mi: mi}
	for _, tr := range travs {
		switch root := tr.RootName(); root {
		case "var", "local":
			b.value(tr, root)
		case "count", "each":
			b.repetition(tr, root, allowed)
		case "path":
			abs, _ := filepath.Abs(mi.mod.Dir)
			rootAbs, _ := filepath.Abs(e.rootDir)
			if b.out == nil {
				b.out = make(map[string]cty.Value, 4)
			}
			b.out["path"] = cty.ObjectVal(map[string]cty.Value{"module": cty.StringVal(abs), "root": cty.StringVal(rootAbs)})
		case "module":
			b.module(tr)
		case "data":
			b.dataSource(tr)
		case "self", "terraform":
			b.fail(tr, "Unsupported reference", "%s is not available in sysbox", root)
		default:
			b.resource(tr)
		}
	}
	return b
}

// lazyVars are the variables of a resource's decode jobs, assembled by the first job that
// runs (once for all instances of the resource, as scope did) rather than when the job is
// made: a deferred job then holds its few resolved values until it runs, not the assembled
// maps and objects (about 1 KB per instance, held by every job until all had run). A job whose
// expressions are plain values and whole-resource references never assembles them (ref).
type lazyVars struct {
	once sync.Once
	b    *scopeBuilder // nil: no references
	vars map[string]cty.Value
	// full are the resources referenced as a whole, when ref may read them: every resource
	// name in the scope is ASCII, which cty leaves as it is (it normalises attribute names to
	// NFC, so that two names of other scripts could be one attribute of the assembled object).
	full []fullRef
}

func newLazyVars(b *scopeBuilder) *lazyVars {
	l := &lazyVars{b: b}
	if b != nil && b.asciiResources() {
		l.full = b.full
	}
	return l
}

func (l *lazyVars) get() map[string]cty.Value {
	l.once.Do(func() {
		if l.b != nil {
			l.vars, l.b = l.b.finish(), nil
		}
	})
	return l.vars
}

// ref is the value TYPE.NAME (two steps, a whole resource) has in the variables get assembles:
// finish puts each whole resource's value at vars[TYPE][NAME], over any attributes of it
// referenced alone, the last of one name last. False when the traversal is not of that form
// or names no resource referenced as a whole here.
func (l *lazyVars) ref(tr hcl.Traversal) (cty.Value, bool) {
	if len(tr) != 2 || len(l.full) == 0 {
		return cty.NilVal, false
	}
	root, ok := tr[0].(hcl.TraverseRoot)
	if !ok {
		return cty.NilVal, false
	}
	attr, ok := tr[1].(hcl.TraverseAttr)
	if !ok {
		return cty.NilVal, false
	}
	for i := len(l.full) - 1; i >= 0; i-- {
		// the key split as finish splits it
		if typ, name, _ := strings.Cut(l.full[i].key, "."); typ == root.Name && name == attr.Name {
			return l.full[i].val, true
		}
	}
	return cty.NilVal, false
}

// asciiResources reports whether every resource key the builder holds is ASCII.
func (b *scopeBuilder) asciiResources() bool {
	for _, f := range b.full {
		if !isASCII(f.key) {
			return false
		}
	}
	for k := range b.partial {
		if !isASCII(k) {
			return false
		}
	}
	return true
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

func (b *scopeBuilder) fail(tr hcl.Traversal, summary, format string, args ...any) {
	rng := tr.SourceRange()
	b.e.errf(rng.Ptr(), summary, format, args...)
	b.failed = true
}

func (b *scopeBuilder) put(root, name string, v cty.Value) {
	b.vars = putNested(b.vars, root, name, v)
}

// putNested sets m[a][b] = v, creating the maps as needed.
func putNested(m map[string]map[string]cty.Value, a, b string, v cty.Value) map[string]map[string]cty.Value {
	if m == nil {
		m = map[string]map[string]cty.Value{}
	}
	if m[a] == nil {
		m[a] = map[string]cty.Value{}
	}
	m[a][b] = v
	return m
}

// value resolves var.NAME and local.NAME.
func (b *scopeBuilder) value(tr hcl.Traversal, root string) {
	mi := b.mi
	name := attrName(tr, 1)
	if name == "" {
		b.fail(tr, "Invalid reference", "%s must be followed by .NAME", root)
		return
	}
	var s *valSlot
	if root == "var" {
		if _, ok := mi.mod.Variables[name]; !ok {
			b.fail(tr, "Reference to undeclared input variable", "no variable %q is declared in %s", name, moduleWhere(mi))
			return
		}
		s = b.e.variable(mi, name)
	} else {
		if _, ok := mi.mod.Locals[name]; !ok {
			b.fail(tr, "Reference to undeclared local value", "no local value %q is declared in %s", name, moduleWhere(mi))
			return
		}
		s = b.e.local(mi, name)
	}
	b.put(root, name, s.val)
	b.deps = append(b.deps, s.deps...)
	b.indirect = append(b.indirect, s.deps...)
	b.failed = b.failed || s.failed
}

// repetition checks count.index and each.key/each.value (withRep supplies their values).
func (b *scopeBuilder) repetition(tr hcl.Traversal, root string, allowed repKind) {
	if root == "count" {
		if allowed != repCount {
			b.fail(tr, "Reference to count in a non-counted context", "count.index is only available in a resource or module block that sets count")
		} else if attrName(tr, 1) != "index" {
			b.fail(tr, "Invalid count attribute", "the only attribute of count is index")
		}
		return
	}
	if allowed != repEach {
		b.fail(tr, "Reference to each in a context without for_each", "each.key and each.value are only available in a resource or module block that sets for_each")
	} else if a := attrName(tr, 1); a != "key" && a != "value" {
		b.fail(tr, "Invalid each attribute", "each has only key and value")
	}
}

// module resolves module.NAME (all outputs) and module.NAME.OUTPUT (one output of a single
// instance call, evaluated alone).
func (b *scopeBuilder) module(tr hcl.Traversal) {
	mi := b.mi
	name := attrName(tr, 1)
	c, ok := mi.mod.Calls[name]
	if !ok {
		b.fail(tr, "Reference to undeclared module", "no module call %q is declared in %s", name, moduleWhere(mi))
		return
	}
	cs := b.e.expandCall(mi, name)
	if cs == nil || cs.failed {
		b.failed = true
		return
	}
	outName := attrName(tr, 2)
	if c.Count == nil && c.ForEach == nil && outName != "" {
		if _, ok := c.Child.Outputs[outName]; !ok {
			b.fail(tr, "Unsupported attribute", "module %q has no output %q", name, outName)
			return
		}
		os := b.e.output(cs.children[0], outName)
		b.modPart = putNested(b.modPart, name, outName, os.val)
		b.deps = append(b.deps, os.deps...)
		b.indirect = append(b.indirect, os.deps...)
		b.failed = b.failed || os.failed
		return
	}
	v, d, f := b.e.callValue(cs)
	if b.modFull == nil {
		b.modFull = map[string]cty.Value{}
	}
	b.modFull[name] = v
	b.deps = append(b.deps, d...)
	b.indirect = append(b.indirect, d...)
	b.failed = b.failed || f
}

// dataSource resolves data.TYPE.NAME.
func (b *scopeBuilder) dataSource(tr hcl.Traversal) {
	mi := b.mi
	typ, name := attrName(tr, 1), attrName(tr, 2)
	key := "data." + typ + "." + name
	if _, ok := mi.mod.Resources[key]; !ok {
		b.fail(tr, "Reference to undeclared data source", "no data %q %q is declared in %s", typ, name, moduleWhere(mi))
		return
	}
	rs := b.e.resource(mi, key)
	b.data = putNested(b.data, typ, name, rs.value())
	b.deps = append(b.deps, rs)
	b.failed = b.failed || rs.failed
}

// resource resolves TYPE.NAME; TYPE.NAME.ATTR of a single-instance resource needs only that
// attribute, so it does not wait for the whole resource.
func (b *scopeBuilder) resource(tr hcl.Traversal) {
	mi := b.mi
	root, name := tr.RootName(), attrName(tr, 1)
	key := root + "." + name
	if _, ok := mi.mod.Resources[key]; !ok {
		b.fail(tr, "Reference to undeclared resource", "no resource %q %q is declared in %s (references are var.*, local.*, module.*, data.*, count.*, each.*, path.* or TYPE.NAME)", root, name, moduleWhere(mi))
		return
	}
	rs := b.e.resource(mi, key)
	b.deps = append(b.deps, rs)
	b.failed = b.failed || rs.failed
	if attr := attrName(tr, 2); attr != "" && rs.kind == repNone && !rs.failed && len(rs.insts) == 1 && rs.insts[0].refAttr != nil {
		if v, ok := rs.insts[0].refAttr(attr); ok {
			b.partial = putNested(b.partial, key, attr, v)
			return
		}
	}
	b.full = append(b.full, fullRef{key, rs.value()}) // now: finish may run on another goroutine (resolve)
}

// fullRef is a resource referenced as a whole (TYPE.NAME) and its value. A slice of them, not
// a map: a deferred job holds its builder until it runs, and a map's smallest table is ~400 B.
type fullRef struct {
	key string
	val cty.Value
}

func (b *scopeBuilder) hasFull(key string) bool {
	for _, f := range b.full {
		if f.key == key {
			return true
		}
	}
	return false
}

// finish assembles the evaluation context's variables from what resolve collected; it
// reads nothing else (see resolve), and runs once per builder.
func (b *scopeBuilder) finish() map[string]cty.Value {
	if b.out == nil {
		b.out = make(map[string]cty.Value, 4)
	}
	for key, attrs := range b.partial {
		if b.hasFull(key) {
			continue
		}
		typ, name, _ := strings.Cut(key, ".")
		b.put(typ, name, cty.ObjectVal(attrs))
	}
	for _, f := range b.full {
		typ, name, _ := strings.Cut(f.key, ".")
		b.put(typ, name, f.val)
	}
	for root, m := range b.vars {
		b.out[root] = cty.ObjectVal(m)
	}
	if len(b.data) > 0 {
		d := map[string]cty.Value{}
		for typ, m := range b.data {
			d[typ] = cty.ObjectVal(m)
		}
		b.out["data"] = cty.ObjectVal(d)
	}
	if len(b.modFull)+len(b.modPart) > 0 {
		m := map[string]cty.Value{}
		for n, parts := range b.modPart {
			m[n] = cty.ObjectVal(parts)
		}
		for n, v := range b.modFull {
			m[n] = v
		}
		b.out["module"] = cty.ObjectVal(m)
	}
	return b.out
}

func moduleWhere(mi *modInst) string {
	if mi.path.IsRoot() {
		return "the root module"
	}
	return mi.path.String() + " (" + mi.mod.Dir + ")"
}
