package config

import (
	"fmt"
	"math/big"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/dynblock"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/secrets"
)

// SecretRef is the cty mark on values produced by env(): a reference, safe to store.
const SecretRef = sensitiveMark("secret-ref")

// Schema is what the decoder needs from a resource type's handler.
type Schema interface {
	// Spec describes the resource body (without the meta-arguments count, for_each,
	// depends_on and lifecycle).
	Spec() hcldec.Spec
	// Decode turns the evaluated body into the type's stored form and the value other
	// expressions see when they reference the instance.
	Decode(req *DecodeRequest) (*Decoded, hcl.Diagnostics)
}

// Schemas finds the schema for a resource type in a mode.
type Schemas interface {
	Schema(mode addrs.ResourceMode, typ string) (Schema, bool)
	// Types lists the known types for a mode, for "unknown type" messages.
	Types(mode addrs.ResourceMode) []string
}

// DecodeRequest is one resource instance to decode.
type DecodeRequest struct {
	Addr      addrs.Instance
	Value     cty.Value // the evaluated body: wholly known, marks removed
	Body      hcl.Body  // for source ranges
	DeclRange hcl.Range
	BaseDir   string // the module directory, for relative paths
}

// Decoded is a handler's result for one instance.
type Decoded struct {
	// Config is the stored form of the desired configuration: it marshals (encoding/json) to a
	// JSON object whose top-level keys are the schema's attributes.
	Config any
	// Ref is the object other expressions see: configuration plus computed attributes (unknown
	// until apply). It must have a string attribute "address". A handler may leave it NilVal
	// and set RefFunc instead, which is called only if something refers to the instance.
	Ref     cty.Value
	RefFunc func() cty.Value
	// RefAttr, if set, returns one attribute of the reference value (false if there is no
	// such attribute), so that `TYPE.NAME.ATTR` need not build the whole object.
	RefAttr func(name string) (cty.Value, bool)
	// References are instances named by the configuration's typed attributes (network, node,
	// artifact); each must exist and becomes a dependency.
	References []Reference
}

// Reference is a typed attribute naming another resource instance.
type Reference struct {
	Addr  addrs.Instance
	Attr  string // e.g. `attachment["lan"].network`
	Range hcl.Range
}

// ResourceInstance is one evaluated resource instance.
type ResourceInstance struct {
	Addr           addrs.Instance
	Config         any
	Ref            cty.Value // see RefValue: NilVal until something refers to the instance
	refFunc        func() cty.Value
	refAttr        func(string) (cty.Value, bool)
	DependsOn      []addrs.Instance // sorted; references, depends_on and typed references
	PreventDestroy bool
	DeclRange      hcl.Range
	BaseDir        string

	slot    *resSlot
	typed   []Reference
	explict []hcl.Traversal
}

// RefValue returns the value expressions see for the instance (computing it if needed).
func (ri *ResourceInstance) RefValue() cty.Value {
	if ri.Ref == cty.NilVal {
		if ri.refFunc == nil {
			return cty.DynamicVal
		}
		ri.Ref = ri.refFunc()
	}
	return ri.Ref
}

// OutputValue is an evaluated root output.
type OutputValue struct {
	Name      string
	Value     cty.Value // marks removed; may be unknown (known after apply)
	Sensitive bool
}

// VariableValue is an evaluated root variable.
type VariableValue struct {
	Name      string
	Value     cty.Value // marks removed
	Sensitive bool
}

// Substrate holds the evaluated substrate block (or the defaults when absent).
type EvaluatedSubstrate struct {
	// Explicit is false when the topology has no substrate block and these are the defaults.
	Explicit    bool
	Name        string
	Drivers     []NamedAttrs
	Backend     *NamedAttrs
	Parallelism int
}

// NamedAttrs is an evaluated driver or backend block.
type NamedAttrs struct {
	Name  string
	Attrs map[string]cty.Value // secret references stay references
}

// Topology is an evaluated configuration.
type Topology struct {
	Sources    *Sources
	Root       *Module
	Substrate  EvaluatedSubstrate
	Resources  []*ResourceInstance // sorted by address
	Outputs    []*OutputValue      // sorted by name
	Variables  []*VariableValue    // root variables, sorted by name
	SecretRefs []secrets.Ref       // every env() reference evaluated, sorted
	EnvRead    map[string]string   // env_optional reads (name → value; "\x00unset" when unset)
}

// Options are the inputs of Evaluate.
type Options struct {
	Schemas   Schemas
	Inputs    map[string]InputValue       // root variable values (-var, -var-file, SYSBOX_VAR_*)
	LookupEnv func(string) (string, bool) // for env_optional; nil means nothing is set
}

// Evaluate expands and evaluates a loaded module tree.
func Evaluate(root *Module, src *Sources, opts Options) (*Topology, hcl.Diagnostics) {
	e := &evaluator{opts: opts, root: root, rootDir: src.Root, funcCache: map[string]map[string]function.Function{},
		secretRefs: map[string]secrets.Ref{}, envRead: map[string]string{}}
	t := &Topology{Sources: src, Root: root}
	ri := e.newModInst(addrs.RootModule, root, nil, nil, rep{})
	e.evalAll(ri)
	e.runJobs()
	for name := range opts.Inputs {
		if _, ok := root.Variables[name]; !ok {
			in := opts.Inputs[name]
			e.diags = append(e.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Value for undeclared variable",
				Detail: fmt.Sprintf("%s sets variable %q, which the root module does not declare", in.Source, name), Subject: in.Range})
		}
	}
	e.link()
	t.Resources = e.instances
	sort.Slice(t.Resources, func(i, j int) bool { return t.Resources[i].Addr.Less(t.Resources[j].Addr) })
	for _, n := range root.outputOrder {
		s := e.output(ri, n)
		o := root.Outputs[n]
		v, marks := s.val.UnmarkDeep()
		if _, ok := marks[Sensitive]; ok && !o.Sensitive {
			e.diags = append(e.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Output refers to sensitive values",
				Detail: fmt.Sprintf("output %q uses a sensitive variable; set sensitive = true on the output", n), Subject: o.Expr.Range().Ptr()})
		}
		t.Outputs = append(t.Outputs, &OutputValue{Name: n, Value: v, Sensitive: o.Sensitive})
	}
	sort.Slice(t.Outputs, func(i, j int) bool { return t.Outputs[i].Name < t.Outputs[j].Name })
	for n, v := range root.Variables {
		val, _ := e.variable(ri, n).val.UnmarkDeep()
		t.Variables = append(t.Variables, &VariableValue{Name: n, Value: val, Sensitive: v.Sensitive})
	}
	sort.Slice(t.Variables, func(i, j int) bool { return t.Variables[i].Name < t.Variables[j].Name })
	t.Substrate = e.substrate(ri)
	for _, r := range e.secretRefs {
		t.SecretRefs = append(t.SecretRefs, r)
	}
	sort.Slice(t.SecretRefs, func(i, j int) bool { return t.SecretRefs[i].String() < t.SecretRefs[j].String() })
	t.EnvRead = e.envRead
	sortDiags(e.diags)
	return t, e.diags
}

// sortDiags orders diagnostics by file and position (parallel decoding must not change the
// order a person reads them in); diagnostics without a range keep their place at the end.
func sortDiags(ds hcl.Diagnostics) {
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i].Subject, ds[j].Subject
		switch {
		case a == nil || b == nil:
			return a != nil && b == nil
		case a.Filename != b.Filename:
			return a.Filename < b.Filename
		}
		return a.Start.Byte < b.Start.Byte
	})
}

type state uint8

const (
	todo state = iota
	busy
	done
)

type repKind uint8

const (
	repNone repKind = iota
	repCount
	repEach
)

type rep struct {
	kind  repKind
	index int
	key   cty.Value
	value cty.Value
}

type valSlot struct {
	st     state
	val    cty.Value
	deps   []*resSlot
	failed bool
}

type resSlot struct {
	st     state
	cfg    *Resource
	mi     *modInst
	schema Schema
	val    cty.Value
	insts  []*ResourceInstance
	kind   repKind
	built  bool // val is computed (lazily, on first reference)
	// deferred: nothing in the configuration refers to this resource, so its instances are
	// decoded after the sequential pass, in parallel (runJobs)
	deferred bool
	deps     []*resSlot
	failed   bool
	name     string
}

type callSlot struct {
	st       state
	cfg      *Call
	mi       *modInst
	kind     repKind
	children []*modInst
	failed   bool
}

type modInst struct {
	path    addrs.Module
	mod     *Module
	parent  *modInst
	call    *callSlot
	rep     rep
	vars    map[string]*valSlot
	locals  map[string]*valSlot
	outputs map[string]*valSlot
	res     map[string]*resSlot
	calls   map[string]*callSlot
	funcs   map[string]function.Function
	prefix  string // "module.x." or ""
}

type evaluator struct {
	opts       Options
	root       *Module
	rootDir    string
	diags      hcl.Diagnostics
	funcCache  map[string]map[string]function.Function
	secretRefs map[string]secrets.Ref
	envRead    map[string]string
	stack      []string
	instances  []*ResourceInstance
	jobs       []*decodeJob
	referenced map[*Module]map[string]bool // resources some expression refers to
	mu         sync.Mutex                  // guards secretRefs and envRead (functions run in jobs)
}

func (e *evaluator) lookupEnv(name string) (string, bool) {
	if e.opts.LookupEnv == nil {
		return "", false
	}
	return e.opts.LookupEnv(name)
}

func (e *evaluator) newModInst(path addrs.Module, mod *Module, parent *modInst, call *callSlot, r rep) *modInst {
	mi := &modInst{path: path, mod: mod, parent: parent, call: call, rep: r,
		vars: map[string]*valSlot{}, locals: map[string]*valSlot{}, outputs: map[string]*valSlot{},
		res: map[string]*resSlot{}, calls: map[string]*callSlot{}, funcs: e.funcsFor(mod.Dir)}
	if !path.IsRoot() {
		mi.prefix = path.String() + "."
	}
	return mi
}

// enter marks a slot busy, reporting a cycle if it already is.
func (e *evaluator) enter(st *state, name string, rng hcl.Range) bool {
	switch *st {
	case busy:
		i := len(e.stack) - 1
		for i >= 0 && e.stack[i] != name {
			i--
		}
		cyc := append(append([]string(nil), e.stack[i+1:]...), name)
		if i >= 0 {
			cyc = append([]string{name}, cyc...)
		}
		e.diags = append(e.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Reference cycle",
			Detail: "these values refer to each other: " + strings.Join(cyc, " → "), Subject: rng.Ptr()})
		return false
	case done:
		return false
	}
	*st = busy
	e.stack = append(e.stack, name)
	return true
}

func (e *evaluator) leave(st *state) {
	*st = done
	e.stack = e.stack[:len(e.stack)-1]
}

func (e *evaluator) errf(rng *hcl.Range, summary, format string, args ...any) {
	e.diags = append(e.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: fmt.Sprintf(format, args...), Subject: rng})
}

func (e *evaluator) evalAll(mi *modInst) {
	for _, n := range sortedKeys(mi.mod.Variables) {
		e.variable(mi, n)
	}
	for _, n := range mi.mod.localOrder {
		e.local(mi, n)
	}
	refd := e.referencedIn(mi.mod)
	for _, n := range mi.mod.resourceOrder {
		if !refd[n] {
			e.slot(mi, n).deferred = true
		}
		e.resource(mi, n)
	}
	for _, n := range mi.mod.outputOrder {
		e.output(mi, n)
	}
	for _, n := range mi.mod.callOrder {
		cs := e.expandCall(mi, n)
		if cs == nil {
			continue
		}
		for _, c := range cs.children {
			e.evalAll(c)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// ---- variables -------------------------------------------------------------------------------

func (e *evaluator) variable(mi *modInst, name string) *valSlot {
	s := mi.vars[name]
	if s == nil {
		s = &valSlot{}
		mi.vars[name] = s
	}
	v := mi.mod.Variables[name]
	if !e.enter(&s.st, mi.prefix+"var."+name, v.DeclRange) {
		if s.st == busy {
			s.failed = true
			return &valSlot{val: cty.DynamicVal, failed: true}
		}
		return s
	}
	defer e.leave(&s.st)
	var val cty.Value
	var rng *hcl.Range
	source := ""
	if mi.parent == nil {
		in, ok := e.opts.Inputs[name]
		switch {
		case ok:
			rng, source = in.Range, in.Source
			if in.IsRaw {
				var d hcl.Diagnostics
				val, d = rawInput(v, in)
				if d.HasErrors() {
					e.diags = append(e.diags, d...)
					s.val, s.failed = cty.DynamicVal, true
					return s
				}
			} else {
				val = in.Value
			}
		case v.Default != cty.NilVal:
			val = v.Default
		default:
			e.errf(v.DeclRange.Ptr(), "No value for required variable",
				"variable %q has no default; set it with -var %s=VALUE, a -var-file, or SYSBOX_VAR_%s", name, name, name)
			s.val, s.failed = cty.DynamicVal, true
			return s
		}
	} else {
		arg, ok := mi.call.cfg.Args[name]
		switch {
		case ok:
			pv, deps, failed := e.evalExpr(mi.parent, arg.Expr, mi.rep, mi.call.kind)
			val, s.deps, s.failed = pv, deps, failed
			r := arg.Expr.Range()
			rng, source = &r, "module "+mi.call.cfg.Name
		case v.Default != cty.NilVal:
			val = v.Default
		default:
			e.errf(mi.call.cfg.DeclRange.Ptr(), "Missing required argument",
				"module %q: variable %q (declared at %s) has no default and is not set", mi.call.cfg.Name, name, v.DeclRange)
			s.val, s.failed = cty.DynamicVal, true
			return s
		}
	}
	if s.failed {
		s.val = cty.DynamicVal
		return s
	}
	cv, err := convertVar(v, val)
	if err != nil {
		e.errf(rng, "Invalid value for variable", "variable %q (from %s): %v", name, orDefault(source, "default"), err)
		s.val, s.failed = cty.DynamicVal, true
		return s
	}
	if v.Sensitive {
		cv = cv.Mark(Sensitive)
	}
	s.val = cv
	for _, vd := range v.Validations {
		ctx := &hcl.EvalContext{Variables: map[string]cty.Value{"var": cty.ObjectVal(map[string]cty.Value{name: cv})}, Functions: mi.funcs}
		for _, tr := range vd.Condition.Variables() {
			if tr.RootName() != "var" || len(tr) < 2 || attrName(tr, 1) != name {
				e.errf(tr.SourceRange().Ptr(), "Invalid validation condition", "a validation condition may refer only to var.%s", name)
			}
		}
		ok, d := vd.Condition.Value(ctx)
		if d.HasErrors() {
			e.diags = append(e.diags, d...)
			continue
		}
		ok, _ = ok.Unmark()
		if !ok.IsKnown() || ok.IsNull() || ok.Type() != cty.Bool {
			e.errf(vd.Condition.Range().Ptr(), "Invalid validation condition", "the condition must be true or false")
			continue
		}
		if ok.False() {
			msg, d := vd.ErrorMessage.Value(ctx)
			text := "validation failed"
			if !d.HasErrors() {
				if m, _ := msg.Unmark(); m.Type() == cty.String && m.IsKnown() && !m.IsNull() {
					text = m.AsString()
				}
			}
			if v.Sensitive {
				source += " (value hidden: sensitive)"
			}
			e.errf(orRange(rng, vd.DeclRange), "Invalid value for variable", "variable %q (from %s): %s\n(validation at %s)", name, orDefault(source, "default"), text, vd.Condition.Range())
			s.failed = true
		}
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func orRange(r *hcl.Range, d hcl.Range) *hcl.Range {
	if r != nil {
		return r
	}
	return d.Ptr()
}

func convertVar(v *Variable, val cty.Value) (cty.Value, error) {
	if v.Defaults != nil {
		val = v.Defaults.Apply(val)
	}
	return convert.Convert(val, v.Type)
}

// ---- locals and outputs ----------------------------------------------------------------------

func (e *evaluator) local(mi *modInst, name string) *valSlot {
	s := mi.locals[name]
	if s == nil {
		s = &valSlot{}
		mi.locals[name] = s
	}
	l := mi.mod.Locals[name]
	if !e.enter(&s.st, mi.prefix+"local."+name, l.Range) {
		if s.st == busy {
			return &valSlot{val: cty.DynamicVal, failed: true}
		}
		return s
	}
	defer e.leave(&s.st)
	s.val, s.deps, s.failed = e.evalExpr(mi, l.Expr, rep{}, repNone)
	return s
}

func (e *evaluator) output(mi *modInst, name string) *valSlot {
	s := mi.outputs[name]
	if s == nil {
		s = &valSlot{}
		mi.outputs[name] = s
	}
	o := mi.mod.Outputs[name]
	if !e.enter(&s.st, mi.prefix+"output."+name, o.DeclRange) {
		if s.st == busy {
			return &valSlot{val: cty.DynamicVal, failed: true}
		}
		return s
	}
	defer e.leave(&s.st)
	s.val, s.deps, s.failed = e.evalExpr(mi, o.Expr, rep{}, repNone)
	if o.Sensitive {
		s.val = s.val.Mark(Sensitive)
	}
	for _, tr := range o.DependsOn {
		s.deps = append(s.deps, e.dependsOnSlots(mi, tr)...)
	}
	return s
}

// ---- expressions -----------------------------------------------------------------------------

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

// ---- expansion -------------------------------------------------------------------------------

type expansion struct {
	kind repKind
	reps []rep
	keys []addrs.InstanceKey
}

func (e *evaluator) expand(mi *modInst, count, forEach hcl.Expression, what string) (expansion, []*resSlot, bool) {
	switch {
	case count != nil:
		v, deps, failed := e.evalExpr(mi, count, rep{}, repNone)
		if failed {
			return expansion{}, deps, true
		}
		v, marks := v.Unmark()
		switch {
		case len(marks) > 0:
			e.errf(count.Range().Ptr(), "Invalid count argument", "%s: count must not come from a sensitive value", what)
		case !v.IsKnown():
			e.errf(count.Range().Ptr(), "Invalid count argument", "%s: count depends on values known only after apply; it must be known when planning", what)
		case v.IsNull():
			e.errf(count.Range().Ptr(), "Invalid count argument", "%s: count must be a number, not null", what)
		default:
			n, err := convert.Convert(v, cty.Number)
			if err != nil {
				e.errf(count.Range().Ptr(), "Invalid count argument", "%s: count must be a whole number: %v", what, err)
				return expansion{}, deps, true
			}
			i, acc := n.AsBigFloat().Int64()
			if acc != big.Exact || i < 0 || i > 1<<20 {
				e.errf(count.Range().Ptr(), "Invalid count argument", "%s: count must be a whole number between 0 and %d, got %s", what, 1<<20, n.AsBigFloat().String())
				return expansion{}, deps, true
			}
			x := expansion{kind: repCount}
			for k := 0; k < int(i); k++ {
				x.reps = append(x.reps, rep{kind: repCount, index: k})
				x.keys = append(x.keys, addrs.IntKey(k))
			}
			return x, deps, false
		}
		return expansion{}, deps, true
	case forEach != nil:
		v, deps, failed := e.evalExpr(mi, forEach, rep{}, repNone)
		if failed {
			return expansion{}, deps, true
		}
		v, marks := v.UnmarkDeep()
		ty := v.Type()
		switch {
		case len(marks) > 0:
			e.errf(forEach.Range().Ptr(), "Invalid for_each argument", "%s: for_each must not come from sensitive values or secret references", what)
		case !v.IsWhollyKnown() && !(v.IsKnown() && (ty.IsMapType() || ty.IsObjectType())):
			e.errf(forEach.Range().Ptr(), "Invalid for_each argument", "%s: for_each depends on values known only after apply; its keys must be known when planning", what)
		case v.IsNull():
			e.errf(forEach.Range().Ptr(), "Invalid for_each argument", "%s: for_each must be a map or a set of strings, not null", what)
		case ty.IsSetType():
			if !ty.ElementType().Equals(cty.String) && ty.ElementType() != cty.DynamicPseudoType {
				e.errf(forEach.Range().Ptr(), "Invalid for_each argument", "%s: for_each set must contain strings, got %s (use toset([...]) of strings)", what, ty.FriendlyName())
				return expansion{}, deps, true
			}
			x := expansion{kind: repEach}
			for it := v.ElementIterator(); it.Next(); {
				_, el := it.Element()
				if el.IsNull() {
					e.errf(forEach.Range().Ptr(), "Invalid for_each argument", "%s: for_each set contains null", what)
					return expansion{}, deps, true
				}
				x.reps = append(x.reps, rep{kind: repEach, key: el, value: el})
				x.keys = append(x.keys, addrs.StringKey(el.AsString()))
			}
			return x, deps, false
		case ty.IsMapType() || ty.IsObjectType():
			x := expansion{kind: repEach}
			for it := v.ElementIterator(); it.Next(); {
				k, el := it.Element()
				x.reps = append(x.reps, rep{kind: repEach, key: k, value: el})
				x.keys = append(x.keys, addrs.StringKey(k.AsString()))
			}
			return x, deps, false
		default:
			e.errf(forEach.Range().Ptr(), "Invalid for_each argument", "%s: for_each must be a map or a set of strings, got %s", what, ty.FriendlyName())
		}
		return expansion{}, deps, true
	}
	return expansion{kind: repNone, reps: []rep{{}}, keys: []addrs.InstanceKey{addrs.NoKey}}, nil, false
}

func (e *evaluator) expandCall(mi *modInst, name string) *callSlot {
	cs := mi.calls[name]
	if cs == nil {
		cs = &callSlot{cfg: mi.mod.Calls[name], mi: mi}
		mi.calls[name] = cs
	}
	if !e.enter(&cs.st, mi.prefix+"module."+name, cs.cfg.DeclRange) {
		if cs.st == busy {
			return nil
		}
		return cs
	}
	defer e.leave(&cs.st)
	c := cs.cfg
	for n, a := range c.Args {
		if _, ok := c.Child.Variables[n]; !ok {
			e.errf(a.NameRange.Ptr(), "Unsupported argument", "module %q (%s) declares no variable %q", name, c.Source, n)
		}
	}
	x, _, failed := e.expand(mi, c.Count, c.ForEach, mi.prefix+"module."+name)
	if failed {
		cs.failed = true
		return cs
	}
	cs.kind = x.kind
	for i, k := range x.keys {
		child := e.newModInst(mi.path.Child(name, k), c.Child, mi, cs, x.reps[i])
		cs.children = append(cs.children, child)
	}
	return cs
}

// callValue is the value of `module.NAME`: an object of outputs, a tuple of them (count) or an
// object keyed by each.key (for_each).
func (e *evaluator) callValue(cs *callSlot) (cty.Value, []*resSlot, bool) {
	var deps []*resSlot
	failed := false
	objs := make([]cty.Value, 0, len(cs.children))
	for _, ch := range cs.children {
		m := map[string]cty.Value{}
		for _, on := range ch.mod.outputOrder {
			s := e.output(ch, on)
			m[on] = s.val
			deps = append(deps, s.deps...)
			failed = failed || s.failed
		}
		objs = append(objs, cty.ObjectVal(m))
	}
	switch cs.kind {
	case repCount:
		if len(objs) == 0 {
			return cty.EmptyTupleVal, deps, failed
		}
		return cty.TupleVal(objs), deps, failed
	case repEach:
		m := map[string]cty.Value{}
		for i, ch := range cs.children {
			s, _ := ch.path[len(ch.path)-1].Key.Str()
			m[s] = objs[i]
		}
		return cty.ObjectVal(m), deps, failed
	}
	return objs[0], deps, failed
}

// ---- resources -------------------------------------------------------------------------------

// decodeJob decodes one resource instance's body. It touches only its own fields and the
// instance, so that jobs of resources nothing refers to can run in parallel (runJobs).
type decodeJob struct {
	rs      *resSlot
	ri      *ResourceInstance
	schema  Schema
	spec    hcldec.Spec
	ctx     *hcl.EvalContext
	dynamic bool
	baseDir string
	diags   hcl.Diagnostics
	failed  bool
}

func (j *decodeJob) errf(summary, format string, args ...any) {
	j.diags = append(j.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary,
		Detail: fmt.Sprintf(format, args...), Subject: j.rs.cfg.DeclRange.Ptr()})
	j.failed = true
}

func (j *decodeJob) run() {
	cfg, addr := j.rs.cfg, j.ri.Addr
	body := cfg.Body
	if j.dynamic {
		body = dynblock.Expand(body, j.ctx)
	}
	val, d := hcldec.Decode(body, j.spec, j.ctx)
	j.diags = append(j.diags, d...)
	if d.HasErrors() {
		j.failed = true
		return
	}
	marked, unknownAt, hasUnknown := scanValue(val)
	var pvm []cty.PathValueMarks
	if marked {
		val, pvm = val.UnmarkDeepWithPaths()
	}
	for _, pm := range pvm {
		if _, ok := pm.Marks[Sensitive]; ok {
			j.errf("Sensitive value in a resource attribute",
				"%s: %s comes from a sensitive variable and would be stored in plan and state as plaintext; pass secrets with env(\"NAME\") so only a reference (secret://env/NAME) is stored",
				addr, pathString(pm.Path))
		}
	}
	if hasUnknown {
		j.errf("Value known only after apply",
			"%s: %s depends on a value known only after apply (external_id, generation, observation, digest, …); resource attributes must be known when planning", addr, pathString(unknownAt))
	}
	if j.failed {
		return
	}
	dec, d := j.schema.Decode(&DecodeRequest{Addr: addr, Value: val, Body: cfg.Body, DeclRange: cfg.DeclRange, BaseDir: j.baseDir})
	j.diags = append(j.diags, d...)
	if d.HasErrors() || dec == nil {
		j.failed = true
		return
	}
	j.ri.Config, j.ri.Ref, j.ri.refFunc, j.ri.refAttr, j.ri.typed = dec.Config, dec.Ref, dec.RefFunc, dec.RefAttr, dec.References
}

// runJobs runs the deferred decode jobs on all CPUs, then merges their diagnostics in job
// order (deterministic output).
func (e *evaluator) runJobs() {
	jobs := e.jobs
	e.jobs = nil
	if len(jobs) == 0 {
		return
	}
	work := make(chan *decodeJob, len(jobs))
	for _, j := range jobs {
		work <- j
	}
	close(work)
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.GOMAXPROCS(0), len(jobs)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				j.run()
			}
		}()
	}
	wg.Wait()
	for _, j := range jobs {
		e.diags = append(e.diags, j.diags...)
		if j.failed {
			j.rs.failed = true
		}
	}
}

func (e *evaluator) resource(mi *modInst, key string) *resSlot {
	rs := mi.res[key]
	if rs == nil {
		cfg := mi.mod.Resources[key]
		rs = &resSlot{cfg: cfg, mi: mi, name: mi.prefix + key}
		mi.res[key] = rs
	}
	if !e.enter(&rs.st, rs.name, rs.cfg.DeclRange) {
		if rs.st == busy {
			return &resSlot{val: cty.DynamicVal, failed: true, name: rs.name}
		}
		return rs
	}
	defer e.leave(&rs.st)
	cfg := rs.cfg
	schema, ok := e.opts.Schemas.Schema(cfg.Addr.Mode, cfg.Addr.Type)
	if !ok {
		kind := "resource"
		if cfg.Addr.Mode == addrs.Data {
			kind = "data source"
		}
		e.errf(cfg.TypeRange.Ptr(), "Unknown "+kind+" type", "%q is not a %s type; known types: %s", cfg.Addr.Type, kind, strings.Join(e.opts.Schemas.Types(cfg.Addr.Mode), ", "))
		rs.val, rs.failed, rs.built = cty.DynamicVal, true, true
		return rs
	}
	rs.schema = schema
	x, xdeps, failed := e.expand(mi, cfg.Count, cfg.ForEach, rs.name)
	if failed {
		rs.val, rs.failed, rs.built = cty.DynamicVal, true, true
		return rs
	}
	spec := schema.Spec()
	hasDynamic := bodyHasDynamic(cfg.Body)
	var travs []hcl.Traversal
	if hasDynamic {
		travs = dynblock.VariablesHCLDec(cfg.Body, spec)
	} else {
		travs = bodyVariables(cfg.Body, spec)
	}
	vars, deps, failed := e.scope(mi, travs, x.kind)
	deps = append(deps, xdeps...)
	var explicit []hcl.Traversal
	for _, tr := range cfg.DependsOn {
		deps = append(deps, e.dependsOnSlots(mi, tr)...)
		explicit = append(explicit, tr)
	}
	deps = uniqueSlots(deps)
	rs.failed = failed
	for i, k := range x.keys {
		addr := addrs.Instance{Module: mi.path, Resource: cfg.Addr, Key: k}
		ri := &ResourceInstance{Addr: addr, PreventDestroy: cfg.PreventDestroy, DeclRange: cfg.DeclRange, BaseDir: mi.mod.Dir, slot: rs, explict: explicit}
		rs.insts = append(rs.insts, ri)
		e.instances = append(e.instances, ri)
		ri.slot = rs
		_ = deps
		if failed {
			continue
		}
		job := &decodeJob{rs: rs, ri: ri, schema: schema, spec: spec, dynamic: hasDynamic, baseDir: mi.mod.Dir,
			ctx: &hcl.EvalContext{Variables: withRep(vars, x.reps[i]), Functions: mi.funcs}}
		if rs.deferred {
			e.jobs = append(e.jobs, job)
			continue
		}
		job.run()
		e.diags = append(e.diags, job.diags...)
		if job.failed {
			rs.failed = true
		}
	}
	rs.deps = deps
	rs.kind = x.kind
	return rs
}

// value is the resource's value for expressions: the instance object (no count/for_each), a
// tuple of them (count) or an object keyed by each.key (for_each). Built on first use.
func (rs *resSlot) value() cty.Value {
	if rs.built {
		return rs.val
	}
	if rs.st != done {
		return cty.DynamicVal // being evaluated (a cycle, already reported)
	}
	rs.built = true
	refs := make([]cty.Value, len(rs.insts))
	for i, ri := range rs.insts {
		if rs.failed {
			// dependents see unknowns; their own "known only after apply" errors are
			// suppressed by failed propagation.
			refs[i] = cty.DynamicVal
		} else {
			refs[i] = ri.RefValue()
		}
	}
	switch rs.kind {
	case repCount:
		if len(refs) == 0 {
			rs.val = cty.EmptyTupleVal
		} else {
			rs.val = cty.TupleVal(refs)
		}
	case repEach:
		m := make(map[string]cty.Value, len(refs))
		for i, ri := range rs.insts {
			k, _ := ri.Addr.Key.Str()
			m[k] = refs[i]
		}
		rs.val = cty.ObjectVal(m)
	default:
		rs.val = refs[0]
	}
	return rs.val
}

func uniqueSlots(in []*resSlot) []*resSlot {
	if len(in) < 2 {
		return in
	}
	seen := make(map[*resSlot]struct{}, len(in))
	out := in[:0]
	for _, s := range in {
		if _, ok := seen[s]; !ok {
			seen[s] = struct{}{}
			out = append(out, s)
		}
	}
	return out
}

// dependsOnSlots resolves a depends_on traversal: a resource (all instances) or a module call
// (every resource in every instance of it, recursively).
func (e *evaluator) dependsOnSlots(mi *modInst, tr hcl.Traversal) []*resSlot {
	rng := tr.SourceRange()
	root := tr.RootName()
	switch root {
	case "module":
		name := attrName(tr, 1)
		if _, ok := mi.mod.Calls[name]; !ok || len(tr) > 2 {
			e.errf(rng.Ptr(), "Invalid depends_on reference", "module.%s: expected a declared module call (module.NAME)", name)
			return nil
		}
		cs := e.expandCall(mi, name)
		if cs == nil {
			return nil
		}
		var out []*resSlot
		var walk func(c *callSlot)
		walk = func(c *callSlot) {
			for _, ch := range c.children {
				for _, k := range ch.mod.resourceOrder {
					rs := ch.res[k]
					if rs == nil {
						rs = &resSlot{cfg: ch.mod.Resources[k], mi: ch, name: ch.prefix + k}
						ch.res[k] = rs
					}
					out = append(out, rs)
				}
				for _, n := range ch.mod.callOrder {
					if sub := e.expandCall(ch, n); sub != nil {
						walk(sub)
					}
				}
			}
		}
		walk(cs)
		return out
	case "data":
		key := "data." + attrName(tr, 1) + "." + attrName(tr, 2)
		if _, ok := mi.mod.Resources[key]; !ok || len(tr) > 3 {
			e.errf(rng.Ptr(), "Invalid depends_on reference", "expected a declared data source (data.TYPE.NAME)")
			return nil
		}
		return []*resSlot{e.slot(mi, key)}
	default:
		key := root + "." + attrName(tr, 1)
		if _, ok := mi.mod.Resources[key]; !ok || len(tr) > 2 {
			e.errf(rng.Ptr(), "Invalid depends_on reference", "expected a declared resource (TYPE.NAME) or module (module.NAME), got %s", traversalString(tr))
			return nil
		}
		return []*resSlot{e.slot(mi, key)}
	}
}

// slot returns the resource slot without evaluating it (depends_on needs no value).
func (e *evaluator) slot(mi *modInst, key string) *resSlot {
	rs := mi.res[key]
	if rs == nil {
		rs = &resSlot{cfg: mi.mod.Resources[key], mi: mi, name: mi.prefix + key}
		mi.res[key] = rs
	}
	return rs
}

func traversalString(tr hcl.Traversal) string {
	var b strings.Builder
	for i, s := range tr {
		switch s := s.(type) {
		case hcl.TraverseRoot:
			b.WriteString(s.Name)
		case hcl.TraverseAttr:
			b.WriteString("." + s.Name)
		default:
			if i > 0 {
				b.WriteString("[…]")
			}
		}
	}
	return b.String()
}

// link turns slot dependencies and typed references into instance dependencies.
func (e *evaluator) link() {
	byKey := make(map[string]*ResourceInstance, len(e.instances))
	for _, ri := range e.instances {
		byKey[ri.Addr.UniqueKey()] = ri
	}
	for _, ri := range e.instances {
		seen := map[string]struct{}{ri.Addr.UniqueKey(): {}}
		var deps []addrs.Instance
		add := func(a addrs.Instance) {
			k := a.UniqueKey()
			if _, ok := seen[k]; ok {
				return
			}
			seen[k] = struct{}{}
			deps = append(deps, a)
		}
		for _, s := range ri.slot.deps {
			for _, d := range s.insts {
				add(d.Addr)
			}
		}
		for _, r := range ri.typed {
			if _, ok := byKey[r.Addr.UniqueKey()]; !ok {
				e.errf(r.Range.Ptr(), "Reference to a missing resource instance", "%s: %s names %s, which the configuration does not declare", ri.Addr, r.Attr, r.Addr)
				continue
			}
			add(r.Addr)
		}
		sort.Slice(deps, func(i, j int) bool { return deps[i].Less(deps[j]) })
		ri.DependsOn = deps
	}
}

func pathString(p cty.Path) string {
	var b strings.Builder
	for _, s := range p {
		switch s := s.(type) {
		case cty.GetAttrStep:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.Name)
		case cty.IndexStep:
			if s.Key.Type() == cty.String {
				fmt.Fprintf(&b, "[%q]", s.Key.AsString())
			} else if s.Key.Type() == cty.Number {
				fmt.Fprintf(&b, "[%s]", s.Key.AsBigFloat().String())
			} else {
				b.WriteString("[…]")
			}
		}
	}
	if b.Len() == 0 {
		return "the value"
	}
	return b.String()
}

// firstUnknown finds a value known only after apply, not descending into references to other
// resources (objects with a string "address"), which handlers consume by address only.
func firstUnknown(v cty.Value) (cty.Path, bool) {
	if v.IsWhollyKnown() {
		return nil, false
	}
	var found cty.Path
	_ = cty.Walk(v, func(p cty.Path, v cty.Value) (bool, error) {
		if found != nil {
			return false, nil
		}
		if !v.IsKnown() {
			found = append(cty.Path(nil), p...)
			return false, nil
		}
		if isReference(v) && len(p) > 0 {
			return false, nil
		}
		return true, nil
	})
	return found, found != nil
}

// isReference reports whether v is a resource object as seen by expressions.
func isReference(v cty.Value) bool {
	ty := v.Type()
	if !ty.IsObjectType() || !ty.HasAttribute("address") || v.IsNull() {
		return false
	}
	a := v.GetAttr("address")
	return a.Type() == cty.String && a.IsKnown() && !a.IsNull()
}

// ---- substrate -------------------------------------------------------------------------------

func (e *evaluator) substrate(ri *modInst) EvaluatedSubstrate {
	s := e.root.Substrate
	if s == nil {
		return EvaluatedSubstrate{Name: "local", Drivers: []NamedAttrs{{Name: "netns", Attrs: map[string]cty.Value{}}, {Name: "nftables", Attrs: map[string]cty.Value{}}},
			Backend: &NamedAttrs{Name: "local", Attrs: map[string]cty.Value{"path": cty.StringVal(".sysbox/state")}}, Parallelism: 8}
	}
	out := EvaluatedSubstrate{Explicit: true, Name: s.Name, Parallelism: 8}
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
				out.Parallelism = int(i)
			}
		}
	}
	return out
}

// bodyHasDynamic reports whether a body (or a nested block) uses a dynamic block, so that the
// dynblock expansion is paid only where it is used.
func bodyHasDynamic(b hcl.Body) bool {
	sb, ok := b.(*hclsyntax.Body)
	if !ok {
		return true
	}
	for _, blk := range sb.Blocks {
		if blk.Type == "dynamic" || bodyHasDynamic(blk.Body) {
			return true
		}
	}
	return false
}

// referencedIn lists the resources of module m that any expression of m refers to (a static
// over-approximation: references in locals, outputs, module arguments, resources and
// substrate). Only these must be decoded before the values that need them.
func (e *evaluator) referencedIn(m *Module) map[string]bool {
	if r, ok := e.referenced[m]; ok {
		return r
	}
	r := map[string]bool{}
	note := func(travs []hcl.Traversal) {
		for _, tr := range travs {
			root := tr.RootName()
			switch root {
			case "var", "local", "module", "count", "each", "path", "self", "terraform":
			case "data":
				r["data."+attrName(tr, 1)+"."+attrName(tr, 2)] = true
			default:
				r[root+"."+attrName(tr, 1)] = true
			}
		}
	}
	for _, l := range m.Locals {
		note(l.Expr.Variables())
	}
	for _, o := range m.Outputs {
		note(o.Expr.Variables())
	}
	for _, c := range m.Calls {
		for _, a := range c.Args {
			note(a.Expr.Variables())
		}
		if c.Count != nil {
			note(c.Count.Variables())
		}
		if c.ForEach != nil {
			note(c.ForEach.Variables())
		}
	}
	for _, res := range m.Resources {
		if res.Count != nil {
			note(res.Count.Variables())
		}
		if res.ForEach != nil {
			note(res.ForEach.Variables())
		}
		note(bodyVariables(res.Body, nil)) // dynamic blocks' for_each and content included
	}
	if m.Substrate != nil {
		for _, d := range append(append([]*Block(nil), m.Substrate.Drivers...), m.Substrate.Backend) {
			if d == nil {
				continue
			}
			for _, a := range d.Attrs {
				note(a.Expr.Variables())
			}
		}
	}
	if e.referenced == nil {
		e.referenced = map[*Module]map[string]bool{}
	}
	e.referenced[m] = r
	return r
}

// scanValue walks v once: whether anything is marked, and the first value known only after
// apply outside references to other resources (see firstUnknown).
func scanValue(v cty.Value) (marked bool, unknownAt cty.Path, hasUnknown bool) {
	_ = cty.Walk(v, func(p cty.Path, v cty.Value) (bool, error) {
		if v.IsMarked() {
			marked = true
		}
		if !v.IsKnown() {
			if !hasUnknown {
				unknownAt, hasUnknown = append(cty.Path(nil), p...), true
			}
			return false, nil
		}
		if len(p) > 0 && isReference(v) {
			return false, nil
		}
		return true, nil
	})
	return marked, unknownAt, hasUnknown
}

// metaArgs are a resource body's meta-arguments, hidden from its schema.
var metaArgs = map[string]bool{"count": true, "for_each": true, "depends_on": true, "provider": true}

// bodyVariables lists the references of a native-syntax body (attributes and nested blocks,
// recursively); other bodies go through hcldec.
func bodyVariables(b hcl.Body, spec hcldec.Spec) []hcl.Traversal {
	sb, ok := b.(*hclsyntax.Body)
	if !ok {
		return hcldec.Variables(b, spec)
	}
	var out []hcl.Traversal
	var walk func(*hclsyntax.Body, bool)
	walk = func(sb *hclsyntax.Body, top bool) {
		for name, a := range sb.Attributes {
			if top && metaArgs[name] {
				continue // count, for_each, depends_on are handled on their own
			}
			out = append(out, a.Expr.Variables()...)
		}
		for _, blk := range sb.Blocks {
			if top && blk.Type == "lifecycle" {
				continue
			}
			walk(blk.Body, false)
		}
	}
	walk(sb, true)
	return out
}
