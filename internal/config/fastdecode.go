package config

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/customdecode"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"zyvor.dev/sysbox/internal/addrs"
)

// A fastSpec decodes a native-syntax body straight from its syntax tree to the value
// hcldec.Decode would return for the spec it was compiled from. hcldec rebuilds the spec's
// schema and an hcl.BodyContent (maps, converted attributes and blocks) for every body and
// nested block, which was a fifth of a large plan's CPU time.
//
// It covers the valid case only: a body with an argument or block the spec does not name, a
// missing required argument, a block with the wrong number of labels, a repeated block key,
// list elements of different types, or any diagnostic from an expression makes decode report
// false, and the caller runs hcldec.Decode, which produces the diagnostics. Expressions are
// pure (impure functions are not offered), so evaluating one twice is harmless.
type fastSpec struct {
	attrs  map[string]*fastAttr // by argument name
	blocks map[string]*fastBlock
	// blockList are the blocks in the order of their index
	blockList []*fastBlock
	labels    []fastLabel
	fields    []string // the object's attribute names (the ObjectSpec keys)
	hideMeta  bool     // a resource body: its meta-arguments and lifecycle block are hidden
	// asciiFields: every field name is ASCII, which cty.ObjectVal keeps as it is, so that the
	// fields map answers for the object (DecodeRequest.Attr)
	asciiFields bool
}

type fastAttr struct {
	keys     []string // ObjectSpec keys naming this argument
	ty       cty.Type
	want     cty.Type  // ty without optional attributes: a value of this type needs no conversion
	null     cty.Value // the value when absent
	required bool
	strList  bool                     // ty is list(string): see literalStringList
	conv     atomic.Pointer[fastConv] // the last conversion built (decoders run in parallel)
}

// fastScope is what the fast decoder evaluates a body's expressions in.
type fastScope interface {
	// ref is the value the two-step traversal TYPE.NAME (a whole resource) has in the
	// evaluation context, read without building the context; false when it cannot say.
	ref(tr hcl.Traversal) (cty.Value, bool)
	// context is the evaluation context, for every other expression (built on first use).
	context() *hcl.EvalContext
}

// ctxScope is a fastScope of a ready evaluation context: no shortcut for references.
type ctxScope struct{ ctx *hcl.EvalContext }

func (ctxScope) ref(hcl.Traversal) (cty.Value, bool) { return cty.NilVal, false }
func (s ctxScope) context() *hcl.EvalContext         { return s.ctx }

// fastConv is a conversion to a fastAttr's type from in. Conversions are pure functions of
// their types, so one serves every body whose argument has that type (the instances of a
// counted resource); convert.Convert built it again for each.
type fastConv struct {
	in cty.Type
	fn convert.Conversion
}

// convert is convert.Convert(v, fa.ty), reusing the last conversion built for v's type.
func (fa *fastAttr) convert(v cty.Value) (cty.Value, bool) {
	if fa.ty == cty.DynamicPseudoType {
		return v, true // convert passes every value through to the dynamic type (marks kept)
	}
	in := v.Type()
	if in.Equals(fa.want) {
		return v, true
	}
	c := fa.conv.Load()
	if c == nil || !c.in.Equals(in) {
		fn := convert.GetConversionUnsafe(in, fa.ty)
		if fn == nil {
			return cty.NilVal, false
		}
		c = &fastConv{in: in, fn: fn}
		fa.conv.Store(c)
	}
	v, err := c.fn(v)
	return v, err == nil
}

type fastBlock struct {
	index  int // in fastSpec.blockList
	key    string
	list   bool // BlockListSpec; else BlockObjectSpec with one label
	labels int
	min    int
	max    int
	empty  cty.Value // the value without blocks
	nested *fastSpec
}

type fastLabel struct {
	key   string
	index int
}

// compileFast returns the fast decoder of spec, or nil when spec uses a part it does not cover
// (only ObjectSpec of AttrSpec, BlockListSpec, BlockObjectSpec with one label and
// BlockLabelSpec are covered).
func compileFast(spec hcldec.Spec, resourceBody bool) *fastSpec {
	obj, ok := spec.(hcldec.ObjectSpec)
	if !ok {
		return nil
	}
	fs := &fastSpec{attrs: map[string]*fastAttr{}, blocks: map[string]*fastBlock{}, hideMeta: resourceBody}
	for key, s := range obj {
		fs.fields = append(fs.fields, key)
		switch s := s.(type) {
		case *hcldec.AttrSpec:
			if customdecode.CustomExpressionDecoderForType(s.Type) != nil || resourceBody && metaArgs[s.Name] {
				return nil
			}
			a := fs.attrs[s.Name]
			if a == nil {
				want := s.Type.WithoutOptionalAttributesDeep()
				a = &fastAttr{ty: s.Type, want: want, null: cty.NullVal(want), strList: s.Type.Equals(cty.List(cty.String))}
				fs.attrs[s.Name] = a
			} else if !a.ty.Equals(s.Type) {
				return nil
			}
			a.keys = append(a.keys, key)
			a.required = a.required || s.Required
		case *hcldec.BlockListSpec:
			nested := compileFast(s.Nested, false)
			if nested == nil || fs.blocks[s.TypeName] != nil {
				return nil
			}
			labels := 0
			for _, l := range nested.labels {
				labels = max(labels, l.index+1)
			}
			fs.blocks[s.TypeName] = &fastBlock{key: key, list: true, labels: labels, min: s.MinItems, max: s.MaxItems,
				empty: cty.ListValEmpty(hcldec.ImpliedType(s.Nested)), nested: nested}
		case *hcldec.BlockObjectSpec:
			nested := compileFast(s.Nested, false)
			if nested == nil || len(s.LabelNames) != 1 || len(nested.labels) > 0 || fs.blocks[s.TypeName] != nil {
				return nil
			}
			fs.blocks[s.TypeName] = &fastBlock{key: key, labels: 1, empty: cty.EmptyObjectVal, nested: nested}
		case *hcldec.BlockLabelSpec:
			fs.labels = append(fs.labels, fastLabel{key: key, index: s.Index})
		default:
			return nil
		}
	}
	for name := range fs.attrs {
		if fs.blocks[name] != nil || resourceBody && name == "lifecycle" {
			return nil
		}
	}
	if resourceBody && (fs.blocks["lifecycle"] != nil || len(fs.labels) > 0) {
		return nil
	}
	fs.asciiFields = !slices.ContainsFunc(fs.fields, func(f string) bool { return !isASCII(f) })
	for _, fb := range fs.blocks {
		fb.index = len(fs.blockList)
		fs.blockList = append(fs.blockList, fb)
	}
	return fs
}

var valsPool = sync.Pool{New: func() any { return map[string]cty.Value{} }}

// decode returns body's value, or false when hcldec.Decode must decide (see fastSpec). clean
// means the value needs no scan (scanValue): every part of it is known and unmarked, or is a
// reference to another resource that is.
func (fs *fastSpec) decode(body hcl.Body, labels []string, sc fastScope) (val cty.Value, clean, ok bool) {
	vals, clean, ok := fs.decodeFields(body, labels, sc)
	if !ok {
		return cty.NilVal, false, false
	}
	val = cty.ObjectVal(vals) // copies vals
	releaseVals(vals)
	return val, clean, true
}

// decodeFields is decode without assembling the object: its attributes by ObjectSpec key, in a
// map of valsPool's (releaseVals takes it back).
func (fs *fastSpec) decodeFields(body hcl.Body, labels []string, sc fastScope) (vals map[string]cty.Value, clean, ok bool) {
	sb, ok := body.(*hclsyntax.Body)
	if !ok {
		return nil, false, false
	}
	vals = valsPool.Get().(map[string]cty.Value)
	if clean, ok = fs.fill(sb, labels, sc, vals); !ok {
		releaseVals(vals)
		return nil, false, false
	}
	return vals, clean, true
}

func releaseVals(vals map[string]cty.Value) {
	clear(vals)
	valsPool.Put(vals)
}

// fill sets vals to sb's attributes (see fields).
func (fs *fastSpec) fill(sb *hclsyntax.Body, labels []string, sc fastScope, vals map[string]cty.Value) (clean, ok bool) {
	clean = true
	for name, a := range sb.Attributes {
		if fs.hideMeta && metaArgs[name] {
			continue
		}
		fa := fs.attrs[name]
		if fa == nil {
			return false, false
		}
		v, c, ok := fa.value(a.Expr, sc)
		if !ok {
			return false, false
		}
		clean = clean && c
		for _, k := range fa.keys {
			vals[k] = v
		}
	}
	for name, fa := range fs.attrs {
		if _, set := sb.Attributes[name]; set {
			continue
		}
		if fa.required {
			return false, false
		}
		for _, k := range fa.keys {
			vals[k] = fa.null
		}
	}
	for _, l := range fs.labels {
		if l.index >= len(labels) {
			return false, false
		}
		vals[l.key] = cty.StringVal(labels[l.index])
	}
	c, ok := fs.decodeBlocks(sb, sc, vals)
	if !ok {
		return false, false
	}
	return clean && c, true
}

// value is an argument's value converted to its type, and whether it is clean (see decode).
// A plain string, or a tuple of them, is read from the syntax tree; a whole-resource
// reference from the scope; anything else is evaluated in the scope's context.
func (fa *fastAttr) value(expr hclsyntax.Expression, sc fastScope) (cty.Value, bool, bool) {
	if fa.strList {
		if v, ok := literalStringList(expr); ok {
			return v, true, true // what converting the tuple gives, without the conversion
		}
	}
	v, lit := literalValue(expr)
	if !lit {
		ok := false
		if t, isTrav := expr.(*hclsyntax.ScopeTraversalExpr); isTrav {
			v, ok = sc.ref(t.Traversal)
		}
		if !ok {
			var d hcl.Diagnostics
			if v, d = expr.Value(sc.context()); len(d) > 0 {
				return cty.NilVal, false, false
			}
		}
	}
	v, ok := fa.convert(v)
	if !ok {
		return cty.NilVal, false, false
	}
	// Plain strings are known and unmarked, and so is what converting them gives.
	return v, lit || !needsScan(v, false), true
}

// blockVals are the values decodeBlocks collects for one block type.
type blockVals struct {
	list []cty.Value          // a BlockListSpec's elements
	obj  map[string]cty.Value // a BlockObjectSpec's, by label (of valsPool's)
}

func (fs *fastSpec) decodeBlocks(sb *hclsyntax.Body, sc fastScope, vals map[string]cty.Value) (clean, ok bool) {
	// by fastBlock.index: a node body has three block types
	var buf [4]blockVals
	got := buf[:0]
	if n := len(fs.blockList); n <= len(buf) {
		got = buf[:n]
	} else {
		got = make([]blockVals, n)
	}
	defer func() {
		for _, g := range got {
			if g.obj != nil {
				releaseVals(g.obj)
			}
		}
	}()
	clean = true
	for _, blk := range sb.Blocks {
		if fs.hideMeta && blk.Type == "lifecycle" {
			continue
		}
		fb := fs.blocks[blk.Type]
		if fb == nil || len(blk.Labels) != fb.labels {
			return false, false
		}
		v, c, ok := fb.nested.decode(blk.Body, blk.Labels, sc)
		if !ok {
			return false, false
		}
		clean = clean && c
		g := &got[fb.index]
		if fb.list {
			g.list = append(g.list, v)
			continue
		}
		if g.obj == nil {
			g.obj = valsPool.Get().(map[string]cty.Value)
		}
		if _, dup := g.obj[blk.Labels[0]]; dup {
			return false, false
		}
		g.obj[blk.Labels[0]] = v
	}
	for _, fb := range fs.blockList {
		g := got[fb.index]
		switch {
		case fb.list && len(g.list) > 0:
			elems := g.list
			if len(elems) < fb.min || fb.max > 0 && len(elems) > fb.max {
				return false, false
			}
			ty := elems[0].Type()
			if ty.HasDynamicTypes() {
				return false, false // hcldec unifies such types to dynamic ones; leave that to it
			}
			for _, v := range elems[1:] {
				if !v.Type().Equals(ty) {
					return false, false // hcldec unifies the types; leave that to it
				}
			}
			vals[fb.key] = cty.ListVal(elems)
		case !fb.list && len(g.obj) > 0:
			vals[fb.key] = cty.ObjectVal(g.obj) // copies g.obj
		default:
			if fb.min > 0 {
				return false, false
			}
			vals[fb.key] = fb.empty
		}
	}
	return clean, true
}

// literalValue is expr's value when expr is a quoted string without interpolations, or a
// tuple of such strings: the value Value returns, without rendering each string as a template
// (a buffer, a copy and a normalisation per string; most strings of a topology are plain).
func literalValue(expr hclsyntax.Expression) (cty.Value, bool) {
	switch e := expr.(type) {
	case *hclsyntax.TemplateExpr:
		if len(e.Parts) != 1 {
			return cty.NilVal, false
		}
		l, ok := e.Parts[0].(*hclsyntax.LiteralValueExpr)
		if !ok || l.Val.Type() != cty.String || l.Val.IsNull() || !l.Val.IsKnown() || l.Val.IsMarked() {
			return cty.NilVal, false
		}
		return l.Val, true
	case *hclsyntax.TupleConsExpr:
		vals := make([]cty.Value, len(e.Exprs))
		for i, x := range e.Exprs {
			v, ok := literalValue(x)
			if !ok {
				return cty.NilVal, false
			}
			vals[i] = v
		}
		return cty.TupleVal(vals), true
	}
	return cty.NilVal, false
}

// literalStringList is the list(string) a tuple of plain strings converts to (see
// literalValue), built without the tuple and the conversion.
func literalStringList(expr hclsyntax.Expression) (cty.Value, bool) {
	e, ok := expr.(*hclsyntax.TupleConsExpr)
	if !ok {
		return cty.NilVal, false
	}
	if len(e.Exprs) == 0 {
		return cty.ListValEmpty(cty.String), true
	}
	vals := make([]cty.Value, len(e.Exprs))
	for i, x := range e.Exprs {
		t, ok := x.(*hclsyntax.TemplateExpr)
		if !ok {
			return cty.NilVal, false
		}
		v, ok := literalValue(t)
		if !ok {
			return cty.NilVal, false
		}
		vals[i] = v
	}
	return cty.ListVal(vals), true
}

// checkFastDecode, when set (by this package's tests), is called with every value the fast
// decoder returns, and whether it called it clean, to compare them with hcldec's value and
// scanValue's finding.
var checkFastDecode func(body hcl.Body, spec hcldec.Spec, ctx *hcl.EvalContext, got cty.Value, clean bool)

// checkAttrDecode, when set (by this package's tests), is called after every Decode of an
// AttrReader that was given the body's attributes instead of its value, to compare the result
// with Decode of the assembled value.
var checkAttrDecode func(s Schema, req *DecodeRequest, got *Decoded, diags hcl.Diagnostics)

// fastSpec returns the fast decoder of the resource type's spec (nil if the spec is not
// covered), compiled once per type (Options.Schemas gives one schema per type). Runs on the
// evaluator's goroutine; the decoders are read-only afterwards.
func (e *evaluator) fastSpec(r addrs.Resource, spec hcldec.Spec) *fastSpec {
	key := fastKey{r.Mode, r.Type}
	if fs, ok := e.fast[key]; ok {
		return fs
	}
	if e.fast == nil {
		e.fast = map[fastKey]*fastSpec{}
	}
	fs := compileFast(spec, true)
	e.fast[key] = fs
	return fs
}

type fastKey struct {
	mode addrs.ResourceMode
	typ  string
}
