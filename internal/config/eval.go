package config

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/graph"
	"zyvor.dev/sysbox/internal/secrets"
)

// unsetMark marks the unknown value of a variable that validate evaluates without a value.
const unsetMark = sensitiveMark("unset-variable")

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

// AttrReader is a Schema whose Decode reads the evaluated body with DecodeRequest.Attr only,
// never DecodeRequest.Value, so that the decoder may hand the body's attributes over without
// assembling them into one object (a map, a type and a normalised name per attribute, for
// every instance). Value is then NilVal.
type AttrReader interface {
	Schema
	ReadsAttrs()
}

// DecodeRequest is one resource instance to decode.
type DecodeRequest struct {
	Addr addrs.Instance
	// Value is the evaluated body: wholly known, marks removed; NilVal when attrs hold it
	// (for an AttrReader).
	Value     cty.Value
	attrs     map[string]cty.Value // Value's attributes, when Value is not assembled
	Body      hcl.Body             // for source ranges
	DeclRange hcl.Range
	BaseDir   string // the module directory, for relative paths
	// SecretPaths are the values that came from env() (secret references). A handler accepts
	// them only where the executor resolves references (e.g. a node's environment) and
	// rejects them elsewhere.
	SecretPaths []cty.Path
}

// Attr returns the evaluated body's attribute name, as Value.GetAttr(name) does; false when
// the body has no such attribute.
func (r *DecodeRequest) Attr(name string) (cty.Value, bool) {
	if r.attrs == nil {
		if ty := r.Value.Type(); !ty.IsObjectType() || !ty.HasAttribute(name) {
			return cty.NilVal, false
		}
		return r.Value.GetAttr(name), true
	}
	if !isASCII(name) {
		name = cty.NormalizeString(name) // as GetAttr does; the attributes' names are ASCII (asciiFields)
	}
	v, ok := r.attrs[name]
	return v, ok
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

	slot         *resSlot
	typed        []Reference
	explicitDeps []hcl.Traversal
	indexed      []indexedInsts // the instances of slot.indexed's resources this one names
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
	// ParallelismSet is true when the block sets parallelism (Parallelism is then the user's
	// bound on all operations; else the default, which drivers may exceed for their own).
	ParallelismSet bool
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

	// deps and order are the dependency graph of Resources and its topological order, when
	// evaluation built them to look for cycles (DependencyGraph).
	deps  *graph.Graph
	order []addrs.Instance
}

// DependencyGraph returns the graph of Resources and their DependsOn, and its topological
// order, that evaluation built to look for cycles (only when some resource has depends_on), so
// that the planner need not build them again. ok is false when none was built or Resources
// changed since.
func (t *Topology) DependencyGraph() (g *graph.Graph, order []addrs.Instance, ok bool) {
	if t.deps == nil || t.deps.Len() != len(t.Resources) || len(t.order) != len(t.Resources) {
		return nil, nil, false
	}
	return t.deps, t.order, true
}

// ReleaseModules lets go of the module tree (Root: every file's syntax tree) and of the
// evaluation's working state (resource and module slots, scopes, decoded values), which the
// instances keep reachable, for a caller that will not evaluate the topology again: planning
// reads Resources and the fields beside them only. Root is nil afterwards. In a large
// topology, the syntax trees alone are about 40 % of what Evaluate leaves live.
func (t *Topology) ReleaseModules() {
	t.Root = nil
	for _, ri := range t.Resources {
		ri.slot, ri.typed, ri.explicitDeps, ri.indexed = nil, nil, nil, nil
	}
}

// Options are the inputs of Evaluate.
type Options struct {
	Schemas   Schemas
	Inputs    map[string]InputValue       // root variable values (-var, -var-file, SYSBOX_VAR_*)
	LookupEnv func(string) (string, bool) // for env_optional; nil means nothing is set
	// ValidateOnly evaluates without requiring root variable values (sysbox validate): an unset
	// required variable is unknown, and what depends on it is skipped, not reported.
	ValidateOnly bool
	// ReleaseBodies lets each resource body's syntax tree go as soon as every instance of a
	// resource nothing refers to is decoded, for a caller that will not evaluate Root again
	// (validate, plan): those resources (in Root and in its modules) have no Body afterwards;
	// a resource something refers to keeps its Body. Evaluation then no longer holds every
	// file's syntax tree and every decoded configuration at once.
	ReleaseBodies bool
}

// Evaluate expands and evaluates a loaded module tree.
func Evaluate(root *Module, src *Sources, opts Options) (*Topology, hcl.Diagnostics) {
	e := &evaluator{opts: opts, root: root, rootDir: src.Root, funcCache: map[string]map[string]function.Function{},
		secretRefs: map[string]secrets.Ref{}, envRead: map[string]string{}}
	t := &Topology{Sources: src, Root: root}
	precomputeRefs(root)
	ri := e.newModInst(addrs.RootModule, root, nil, nil, rep{})
	e.evalAll(ri)
	e.runJobs()
	for _, name := range sortedKeys(opts.Inputs) {
		if _, ok := root.Variables[name]; !ok {
			in := opts.Inputs[name]
			// -var and var files name this topology's variables: a typo is an error. The
			// environment is shared by many topologies: a warning.
			sev := hcl.DiagError
			if in.FromEnv {
				sev = hcl.DiagWarning
			}
			e.diags = append(e.diags, &hcl.Diagnostic{Severity: sev, Summary: "Value for undeclared variable",
				Detail: fmt.Sprintf("%s sets variable %q, which the root module does not declare", in.Source, name), Subject: in.Range})
		}
	}
	e.link()
	t.deps, t.order = e.checkCycles()
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
		less, _ := placeLess(ds[i].Subject, ds[j].Subject)
		return less
	})
}

// placeLess orders two diagnostic ranges by file and position (a missing range last); same
// reports whether they are at the same place.
func placeLess(a, b *hcl.Range) (less, same bool) {
	switch {
	case a == nil || b == nil:
		return a != nil && b == nil, a == nil && b == nil
	case a.Filename != b.Filename:
		return a.Filename < b.Filename, false
	}
	return a.Start.Byte < b.Start.Byte, a.Start.Byte == b.Start.Byte
}

// sortSamePlace orders hcldec's diagnostics of one body as sortDiags does, and those at the
// same place by summary and detail: hcldec checks a spec's arguments in map order, so that two
// missing arguments were reported in either order from one run to the next.
func sortSamePlace(ds hcl.Diagnostics) {
	sort.SliceStable(ds, func(i, j int) bool {
		if less, same := placeLess(ds[i].Subject, ds[j].Subject); !same {
			return less
		}
		if ds[i].Summary != ds[j].Summary {
			return ds[i].Summary < ds[j].Summary
		}
		return ds[i].Detail < ds[j].Detail
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
	// indexed are the resources of deps its body names only through indexes of single
	// instances, with those index expressions (see indexRefs)
	indexed []indexedSlot
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
	fast       map[fastKey]*fastSpec       // compiled decoders by schema (fastdecode.go)
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
	var source string
	var final bool
	if mi.parent == nil {
		val, rng, source, final = e.rootVariableValue(name, v, s)
	} else {
		val, rng, source, final = e.moduleVariableValue(mi, name, v, s)
	}
	if final {
		return s
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
	e.checkValidations(mi, name, v, cv, rng, source, s)
	return s
}

// rootVariableValue is a root module variable's raw value: its input, else its default. final
// means s is settled (failed, or unknown under validate) and the value is not to be converted.
func (e *evaluator) rootVariableValue(name string, v *Variable, s *valSlot) (val cty.Value, rng *hcl.Range, source string, final bool) {
	in, ok := e.opts.Inputs[name]
	switch {
	case ok:
		rng, source = in.Range, in.Source
		if !in.IsRaw {
			return in.Value, rng, source, false
		}
		val, d := rawInput(v, in)
		if d.HasErrors() {
			e.diags = append(e.diags, d...)
			s.val, s.failed = cty.DynamicVal, true
			return cty.NilVal, nil, "", true
		}
		return val, rng, source, false
	case v.Default != cty.NilVal:
		return v.Default, nil, "", false
	case e.opts.ValidateOnly:
		e.diags = append(e.diags, &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: "Variable without a value",
			Detail: fmt.Sprintf("variable %q has no value: what depends on it is not checked (set it with -var %s=VALUE to check everything)", name, name), Subject: v.DeclRange.Ptr()})
		s.val = cty.UnknownVal(v.Type).Mark(unsetMark)
		return cty.NilVal, nil, "", true
	}
	e.errf(v.DeclRange.Ptr(), "No value for required variable",
		"variable %q has no default; set it with -var %s=VALUE, a -var-file, or SYSBOX_VAR_%s", name, name, name)
	s.val, s.failed = cty.DynamicVal, true
	return cty.NilVal, nil, "", true
}

// moduleVariableValue is a child module variable's raw value: the call's argument (evaluated in
// the parent, its dependencies and failure recorded in s), else the default.
func (e *evaluator) moduleVariableValue(mi *modInst, name string, v *Variable, s *valSlot) (val cty.Value, rng *hcl.Range, source string, final bool) {
	arg, ok := mi.call.cfg.Args[name]
	switch {
	case ok:
		pv, deps, failed := e.evalExpr(mi.parent, arg.Expr, mi.rep, mi.call.kind)
		s.deps, s.failed = deps, failed
		r := arg.Expr.Range()
		return pv, &r, "module " + mi.call.cfg.Name, false
	case v.Default != cty.NilVal:
		return v.Default, nil, "", false
	}
	e.errf(mi.call.cfg.DeclRange.Ptr(), "Missing required argument",
		"module %q: variable %q (declared at %s) has no default and is not set", mi.call.cfg.Name, name, v.DeclRange)
	s.val, s.failed = cty.DynamicVal, true
	return cty.NilVal, nil, "", true
}

// checkValidations evaluates v's validation blocks against its converted value cv, failing s
// (with the validation's message) where a condition is false.
func (e *evaluator) checkValidations(mi *modInst, name string, v *Variable, cv cty.Value, rng *hcl.Range, source string, s *valSlot) {
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

func (e *evaluator) local(mi *modInst, name string) *valSlot {
	l := mi.mod.Locals[name]
	return e.evalNamed(mi, mi.locals, name, "local."+name, l.Expr, l.Range, nil)
}

// evalNamed evaluates a named value of a module instance (a local or an output) once, caching
// it in slots[name]; label names it in cycle reports, and a reference cycle yields a failed
// dynamic value. finish, when set, runs after a fresh evaluation, still inside it (outputs mark
// sensitivity and add their depends_on there).
func (e *evaluator) evalNamed(mi *modInst, slots map[string]*valSlot, name, label string, expr hcl.Expression, rng hcl.Range, finish func(*valSlot)) *valSlot {
	s := slots[name]
	if s == nil {
		s = &valSlot{}
		slots[name] = s
	}
	if !e.enter(&s.st, mi.prefix+label, rng) {
		if s.st == busy {
			return &valSlot{val: cty.DynamicVal, failed: true}
		}
		return s
	}
	defer e.leave(&s.st)
	s.val, s.deps, s.failed = e.evalExpr(mi, expr, rep{}, repNone)
	if finish != nil {
		finish(s)
	}
	return s
}

func (e *evaluator) output(mi *modInst, name string) *valSlot {
	o := mi.mod.Outputs[name]
	return e.evalNamed(mi, mi.outputs, name, "output."+name, o.Expr, o.DeclRange, func(s *valSlot) {
		if o.Sensitive {
			s.val = s.val.Mark(Sensitive)
		}
		for _, tr := range o.DependsOn {
			s.deps = append(s.deps, e.dependsOnSlots(mi, tr)...)
		}
	})
}

// precomputeRefs computes every resource body's references on all CPUs before the sequential
// evaluation needs them (walking expressions is a tenth of evaluating a large topology).
func precomputeRefs(root *Module) {
	var all []*Resource
	seen := map[*Module]bool{}
	var walk func(m *Module)
	walk = func(m *Module) {
		if m == nil || seen[m] {
			return
		}
		seen[m] = true
		for _, k := range m.resourceOrder {
			all = append(all, m.Resources[k])
		}
		for _, c := range m.Calls {
			walk(c.Child)
		}
	}
	walk(root)
	work := make(chan *Resource, len(all))
	for _, r := range all {
		work <- r
	}
	close(work)
	var wg sync.WaitGroup
	for w := 0; w < min(runtime.GOMAXPROCS(0), len(all)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				r.refs()
			}
		}()
	}
	wg.Wait()
}

// checkCycles reports a dependency cycle among instances (references cannot form one without
// a reference cycle, already reported, but depends_on can), naming its addresses, at the
// declaration of its first member. Without depends_on and without errors so far there is no
// cycle to find (a reference cycle is an error), and the graph is not built.
func (e *evaluator) checkCycles() (*graph.Graph, []addrs.Instance) {
	if !e.diags.HasErrors() && !slices.ContainsFunc(e.instances, func(ri *ResourceInstance) bool { return len(ri.explicitDeps) > 0 }) {
		return nil, nil
	}
	g := graph.NewSized(len(e.instances))
	for _, ri := range e.instances {
		g.ConnectShared(ri.Addr, ri.DependsOn) // instances of a resource share one list (link)
	}
	order, err := g.TopoOrder()
	var ce *graph.CycleError
	if errors.As(err, &ce) && len(ce.Cycle) > 0 {
		i := slices.IndexFunc(e.instances, func(ri *ResourceInstance) bool { return ri.Addr.Equal(ce.Cycle[0]) })
		e.errf(e.instances[i].DeclRange.Ptr(), "Dependency cycle", "%s (through references and depends_on)", strings.TrimPrefix(ce.Error(), "dependency cycle: "))
	}
	if err != nil || e.diags.HasErrors() {
		return nil, nil
	}
	return g, order
}
