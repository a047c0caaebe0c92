package config

import (
	"math/big"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"

	"zyvor.dev/sysbox/internal/addrs"
)

// An instance of a resource that refers to another resource only through indexes of single
// instances — `network = sysbox_network.lan[count.index % 5]`, `sysbox_network.lan[0].ipv4_cidr`
// — depends on the instances those indexes name, not on every instance of the resource: in a
// destroy, a network's bridge can then go as soon as its own nodes are gone, and a lab of N
// nodes over M networks records N dependencies on networks instead of N × M. The key
// expressions are evaluated per instance, in the instance's context (count.index, each.*,
// variables); an instance whose key does not evaluate to a known key of an existing instance
// depends on the whole resource, as does every instance when the resource is also named in any
// other way (bare, splat, in a for expression, count, for_each, depends_on, through a local
// value or output, in a dynamic block).

// indexRef is a resource of the module that a body names only through indexes.
type indexRef struct {
	key  string                 // "TYPE.NAME" or "data.TYPE.NAME", as Module.Resources keys it
	keys []hclsyntax.Expression // the index expressions, in the order they appear
}

// indexedSlot is an indexRef resolved to its resource, for one resource's instances.
type indexedSlot struct {
	slot *resSlot
	keys []hclsyntax.Expression
}

// indexedInsts are the instances of slot that one instance's index expressions name.
type indexedInsts struct {
	slot  *resSlot
	insts []*ResourceInstance
}

// indexRefs returns the resources the body names only through indexes of single instances
// (static: computed once per resource block). Meta-arguments and the lifecycle block are not
// looked at (count, for_each and depends_on make their resources whole dependencies: see
// indexedSlots).
func (r *Resource) indexRefs() []indexRef {
	if r.indexRefsSet {
		return r.indexRefsVal
	}
	r.indexRefsSet = true
	sb, ok := r.Body.(*hclsyntax.Body)
	if !ok {
		return nil
	}
	w := &indexWalker{wrapped: map[*hclsyntax.ScopeTraversalExpr]bool{}, whole: map[string]bool{}}
	var walk func(*hclsyntax.Body, bool)
	walk = func(sb *hclsyntax.Body, top bool) {
		for name, a := range sb.Attributes {
			if top && metaArgs[name] {
				continue
			}
			hclsyntax.Walk(a.Expr, w)
		}
		for _, blk := range sb.Blocks {
			if top && blk.Type == "lifecycle" {
				continue
			}
			walk(blk.Body, false)
		}
	}
	walk(sb, true)
	var out []indexRef
	for _, ir := range w.refs {
		if !w.whole[ir.key] {
			out = append(out, ir)
		}
	}
	r.indexRefsVal = out
	return out
}

// indexWalker collects index references (refs) and the resources named any other way (whole).
type indexWalker struct {
	refs    []indexRef
	wrapped map[*hclsyntax.ScopeTraversalExpr]bool // the collections of the indexes in refs
	whole   map[string]bool
	inFor   int // depth of for expressions: their keys may name the for's own variables
}

// resourceKey returns the resource a traversal names ("TYPE.NAME" or "data.TYPE.NAME") and
// how many of its steps that takes; "" when it names something else.
func resourceKey(tr hcl.Traversal) (string, int) {
	switch root := tr.RootName(); root {
	case "var", "local", "module", "count", "each", "path", "self", "terraform":
		return "", 0
	case "data":
		if len(tr) < 3 || attrName(tr, 1) == "" || attrName(tr, 2) == "" {
			return "", 0
		}
		return "data." + attrName(tr, 1) + "." + attrName(tr, 2), 3
	default:
		if len(tr) < 2 || attrName(tr, 1) == "" {
			return "", 0
		}
		return root + "." + attrName(tr, 1), 2
	}
}

func (w *indexWalker) add(key string, k hclsyntax.Expression) {
	for i := range w.refs {
		if w.refs[i].key == key {
			w.refs[i].keys = append(w.refs[i].keys, k)
			return
		}
	}
	w.refs = append(w.refs, indexRef{key: key, keys: []hclsyntax.Expression{k}})
}

func (w *indexWalker) Enter(n hclsyntax.Node) hcl.Diagnostics {
	switch n := n.(type) {
	case *hclsyntax.ForExpr:
		w.inFor++
	case *hclsyntax.IndexExpr:
		if c, ok := n.Collection.(*hclsyntax.ScopeTraversalExpr); ok {
			if key, steps := resourceKey(c.Traversal); key != "" && len(c.Traversal) == steps {
				w.wrapped[c] = true
				if w.inFor > 0 {
					w.whole[key] = true
				} else {
					w.add(key, n.Key)
				}
			}
		}
	case *hclsyntax.ScopeTraversalExpr:
		key, steps := resourceKey(n.Traversal)
		if key == "" || w.wrapped[n] {
			break
		}
		if ix, ok := stepIndex(n.Traversal, steps); ok && w.inFor == 0 {
			w.add(key, &hclsyntax.LiteralValueExpr{Val: ix, SrcRange: n.SrcRange})
		} else {
			w.whole[key] = true
		}
	}
	return nil
}

func (w *indexWalker) Exit(n hclsyntax.Node) hcl.Diagnostics {
	if _, ok := n.(*hclsyntax.ForExpr); ok {
		w.inFor--
	}
	return nil
}

// stepIndex returns the literal index at step i of tr (TYPE.NAME[0], TYPE.NAME["a"]).
func stepIndex(tr hcl.Traversal, i int) (cty.Value, bool) {
	if len(tr) <= i {
		return cty.NilVal, false
	}
	ix, ok := tr[i].(hcl.TraverseIndex)
	return ix.Key, ok
}

// indexedSlots resolves the body's index references of a resource in mi to resources with
// count or for_each (indexes of a single-instance resource read its attributes), leaving out
// those it also depends on otherwise: through its count, for_each or depends_on (whole) or a
// variable, local value or module output (indirect).
func indexedSlots(mi *modInst, self *resSlot, refs []indexRef, whole, indirect []*resSlot) []indexedSlot {
	var out []indexedSlot
	for _, ir := range refs {
		rs := mi.res[ir.key]
		if rs == nil || rs == self || rs.failed || rs.kind == repNone {
			continue
		}
		if containsSlot(whole, rs) || containsSlot(indirect, rs) {
			continue
		}
		out = append(out, indexedSlot{slot: rs, keys: ir.keys})
	}
	return out
}

func containsSlot(in []*resSlot, s *resSlot) bool {
	for _, x := range in {
		if x == s {
			return true
		}
	}
	return false
}

// indexedInsts evaluates the job's index expressions in its context; a resource whose keys do
// not all name one of its instances is left out (the instance depends on all of them).
func (j *decodeJob) indexedInsts() []indexedInsts {
	var out []indexedInsts
	for _, is := range j.rs.indexed {
		if insts, ok := instancesOf(is, j.context()); ok {
			out = append(out, indexedInsts{slot: is.slot, insts: insts})
		}
	}
	return out
}

// instancesOf evaluates is's index expressions to the instances of is.slot they name; false
// when one does not evaluate to the key of an instance.
func instancesOf(is indexedSlot, ctx *hcl.EvalContext) ([]*ResourceInstance, bool) {
	insts := make([]*ResourceInstance, 0, len(is.keys))
	for _, x := range is.keys {
		ri, ok := instanceOf(x, ctx, is.slot)
		if !ok {
			return nil, false
		}
		insts = append(insts, ri)
	}
	return insts, true
}

// instanceOf evaluates an index expression of slot to the instance it names.
func instanceOf(x hclsyntax.Expression, ctx *hcl.EvalContext, slot *resSlot) (*ResourceInstance, bool) {
	v, d := x.Value(ctx)
	if d.HasErrors() || !v.IsWhollyKnown() || v.IsNull() || v.IsMarked() {
		return nil, false
	}
	switch slot.kind {
	case repCount:
		n, err := convert.Convert(v, cty.Number)
		if err != nil {
			return nil, false
		}
		i, acc := n.AsBigFloat().Int64()
		if acc != big.Exact || i < 0 || i >= int64(len(slot.insts)) {
			return nil, false
		}
		return slot.insts[i], true // a count resource's instances are in key order
	case repEach:
		s, err := convert.Convert(v, cty.String)
		if err != nil {
			return nil, false
		}
		k := addrs.StringKey(s.AsString())
		for _, ri := range slot.insts {
			if ri.Addr.Key == k {
				return ri, true
			}
		}
	}
	return nil, false
}
