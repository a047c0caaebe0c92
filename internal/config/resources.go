package config

import (
	"fmt"
	"math/big"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/dynblock"
	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"zyvor.dev/sysbox/internal/addrs"
)

type expansion struct {
	kind repKind
	reps []rep
	keys []addrs.InstanceKey
}

func (e *evaluator) expand(mi *modInst, count, forEach hcl.Expression, what string) (expansion, []*resSlot, bool) {
	switch {
	case count != nil:
		return e.expandCount(mi, count, what)
	case forEach != nil:
		return e.expandForEach(mi, forEach, what)
	}
	return expansion{kind: repNone, reps: []rep{{}}, keys: []addrs.InstanceKey{addrs.NoKey}}, nil, false
}

// expandCount expands by a count argument: instances 0..count-1.
func (e *evaluator) expandCount(mi *modInst, count hcl.Expression, what string) (expansion, []*resSlot, bool) {
	v, deps, failed := e.evalExpr(mi, count, rep{}, repNone)
	if failed {
		return expansion{}, deps, true
	}
	v, marks := v.Unmark()
	if _, unset := marks[unsetMark]; unset {
		return expansion{}, deps, true // validate without a value: skipped, not reported
	}
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
}

// expandForEach expands by a for_each argument: one instance per key of a map or object, or per
// element of a set of strings.
func (e *evaluator) expandForEach(mi *modInst, forEach hcl.Expression, what string) (expansion, []*resSlot, bool) {
	v, deps, failed := e.evalExpr(mi, forEach, rep{}, repNone)
	if failed {
		return expansion{}, deps, true
	}
	v, marks := v.UnmarkDeep()
	if _, unset := marks[unsetMark]; unset {
		return expansion{}, deps, true // validate without a value: skipped, not reported
	}
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

// decodeJob decodes one resource instance's body. It writes only its own fields and the
// instance, and reads its slot's schema, module instance and body, fixed before any job runs,
// so that jobs of resources nothing refers to can run in parallel (runJobs). It is small: the
// jobs of a large topology are all held until the last has run.
type decodeJob struct {
	rs      *resSlot // with the schema, module instance (functions, directory) and body
	ri      *ResourceInstance
	fast    *fastSpec        // nil: hcldec only
	vars    *lazyVars        // the evaluation context's variables, shared by the resource's instances
	rep     *rep             // count.index or each.*: into the resource's expansion; nil when neither
	ctx     *hcl.EvalContext // made by run
	diags   hcl.Diagnostics
	dynamic bool
	failed  bool
}

func (j *decodeJob) errf(summary, format string, args ...any) {
	j.diags = append(j.diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary,
		Detail: fmt.Sprintf(format, args...), Subject: j.rs.cfg.DeclRange.Ptr()})
	j.failed = true
}

// context is the job's evaluation context, built on first use: a body whose expressions are
// plain values and whole-resource references needs none (see ref).
func (j *decodeJob) context() *hcl.EvalContext {
	if j.ctx == nil {
		r := rep{}
		if j.rep != nil {
			r = *j.rep
		}
		j.ctx = &hcl.EvalContext{Variables: withRep(j.vars.get(), r), Functions: j.rs.mi.funcs}
	}
	return j.ctx
}

// ref implements fastScope: TYPE.NAME is the value of the resource its scope resolved.
func (j *decodeJob) ref(tr hcl.Traversal) (cty.Value, bool) {
	return j.vars.ref(tr)
}

func (j *decodeJob) run() {
	cfg, addr := j.rs.cfg, j.ri.Addr
	val, fields, clean, ok := j.decodeBody()
	if !ok {
		return
	}
	var marked, hasUnknown bool
	var unknownAt cty.Path
	if !clean {
		marked, unknownAt, hasUnknown = scanValue(val)
	}
	var pvm []cty.PathValueMarks
	if marked {
		val, pvm = val.UnmarkDeepWithPaths()
	}
	var secretPaths []cty.Path
	for _, pm := range pvm {
		if _, ok := pm.Marks[unsetMark]; ok {
			j.failed = true // depends on a variable validate has no value for: not checked
			return
		}
	}
	for _, pm := range pvm {
		if _, ok := pm.Marks[SecretRef]; ok {
			secretPaths = append(secretPaths, pm.Path)
		}
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
	req := &DecodeRequest{Addr: addr, Value: val, attrs: fields, Body: cfg.Body, DeclRange: cfg.DeclRange, BaseDir: j.rs.mi.mod.Dir, SecretPaths: secretPaths}
	dec, d := j.rs.schema.Decode(req)
	if fields != nil {
		if checkAttrDecode != nil {
			checkAttrDecode(j.rs.schema, req, dec, d)
		}
		req.attrs = nil
		releaseVals(fields)
	}
	j.diags = append(j.diags, d...)
	if d.HasErrors() || dec == nil {
		j.failed = true
		return
	}
	j.ri.Config, j.ri.Ref, j.ri.refFunc, j.ri.refAttr, j.ri.typed = dec.Config, dec.Ref, dec.RefFunc, dec.RefAttr, dec.References
	if len(j.rs.indexed) > 0 {
		j.ri.indexed = j.indexedInsts()
	}
}

// decodeBody evaluates the body: its value, or for an AttrReader its attributes (fields, of
// valsPool's) when nothing in them needs a scan (the scan reads the value); clean when the
// value needs no scan; false when hcldec reported errors (in j.diags).
func (j *decodeJob) decodeBody() (val cty.Value, fields map[string]cty.Value, clean, ok bool) {
	spec, cfg := j.rs.schema.Spec(), j.rs.cfg
	// The fast decoder skips the meta-arguments itself; hcldec and dynblock see them hidden.
	body := cfg.Body
	if j.dynamic {
		body = dynblock.Expand(cfg.schemaBody(), j.context())
	}
	// hcldec sees the meta-arguments hidden (a dynamic body was expanded from the schema body).
	hcldecBody := func() hcl.Body {
		if j.dynamic {
			return body
		}
		return cfg.schemaBody()
	}
	if j.fast != nil {
		if fields, clean, ok = j.fast.decodeFields(body, nil, j); ok {
			if _, reads := j.rs.schema.(AttrReader); !(clean && reads && j.fast.asciiFields) {
				val = cty.ObjectVal(fields)
				releaseVals(fields)
				fields = nil
			}
			if checkFastDecode != nil {
				got := val
				if fields != nil {
					got = cty.ObjectVal(fields)
				}
				checkFastDecode(hcldecBody(), spec, j.context(), got, clean)
			}
			return val, fields, clean, true
		}
	}
	val, d := hcldec.Decode(hcldecBody(), spec, j.context())
	sortSamePlace(d)
	j.diags = append(j.diags, d...)
	if d.HasErrors() {
		j.failed = true
		return cty.NilVal, nil, false, false
	}
	return val, nil, false, true
}

// runJobs runs the deferred decode jobs on all CPUs, then merges their diagnostics in job
// order (deterministic output).
func (e *evaluator) runJobs() {
	jobs := e.jobs
	e.jobs = nil
	if len(jobs) == 0 {
		return
	}
	// left counts each resource's jobs still to run, when a body goes once they have run.
	var left map[*Resource]*atomic.Int32
	if e.opts.ReleaseBodies {
		left = make(map[*Resource]*atomic.Int32, len(jobs))
		for _, j := range jobs {
			n := left[j.rs.cfg]
			if n == nil {
				n = new(atomic.Int32)
				left[j.rs.cfg] = n
			}
			n.Add(1)
		}
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
				j.ctx, j.vars, j.rep = nil, nil, nil // not needed once decoded (jobs stay listed for their diagnostics)
				if left != nil && left[j.rs.cfg].Add(-1) == 0 {
					// Every user of the body has run: the deferred resources are those nothing
					// refers to, and all their instances (in every module instance) are jobs here.
					j.rs.cfg.Body, j.rs.cfg.bodyRefs = nil, nil
				}
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
	vars, deps, indirect, failed := e.bodyScope(mi, cfg, spec, hasDynamic, x.kind)
	bodyDeps := len(deps)
	deps = append(deps, xdeps...)
	var explicit []hcl.Traversal
	for _, tr := range cfg.DependsOn {
		deps = append(deps, e.dependsOnSlots(mi, tr)...)
		explicit = append(explicit, tr)
	}
	if !hasDynamic && x.kind != repNone {
		if refs := cfg.indexRefs(); len(refs) > 0 {
			rs.indexed = indexedSlots(mi, rs, refs, deps[bodyDeps:], indirect)
		}
	}
	deps = uniqueSlots(deps)
	rs.failed = failed
	for i, k := range x.keys {
		addr := addrs.NewInstance(mi.path, cfg.Addr, k)
		ri := &ResourceInstance{Addr: addr, PreventDestroy: cfg.PreventDestroy, DeclRange: cfg.DeclRange, BaseDir: mi.mod.Dir, slot: rs, explicitDeps: explicit}
		rs.insts = append(rs.insts, ri)
		e.instances = append(e.instances, ri)
		ri.slot = rs
		if failed {
			continue
		}
		job := &decodeJob{rs: rs, ri: ri, fast: e.fastSpec(cfg.Addr, spec), dynamic: hasDynamic, vars: vars}
		if x.reps[i].kind != repNone {
			job.rep = &x.reps[i]
		}
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

// bodyScope resolves the references of a resource's body (through dynamic blocks, as
// dynblock finds them): the variables its decode jobs share, what it depends on, and whether
// a reference failed; indirect are the dependencies that came through variables, local values
// and module outputs.
func (e *evaluator) bodyScope(mi *modInst, cfg *Resource, spec hcldec.Spec, hasDynamic bool, kind repKind) (vars *lazyVars, deps, indirect []*resSlot, failed bool) {
	var travs []hcl.Traversal
	if hasDynamic {
		travs = dynblock.VariablesHCLDec(cfg.schemaBody(), spec)
	} else {
		travs = cfg.refs()
	}
	sc := e.resolve(mi, travs, kind)
	if sc == nil {
		return newLazyVars(nil), nil, nil, false
	}
	return newLazyVars(sc), sc.deps, sc.indirect, sc.failed
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

// dependsOnSlots resolves one depends_on entry. As in OpenTofu, an entry names a whole
// resource, data source or module call, optionally one instance of it (which still means the
// whole object): TYPE.NAME, TYPE.NAME[KEY], data.TYPE.NAME, module.NAME, module.NAME[KEY].
func (e *evaluator) dependsOnSlots(mi *modInst, tr hcl.Traversal) []*resSlot {
	rng := tr.SourceRange()
	root := tr.RootName()
	bad := func(format string, args ...any) []*resSlot {
		e.errf(rng.Ptr(), "Invalid depends_on reference", format, args...)
		return nil
	}
	// nameLen is the number of steps naming the object; one index step may follow.
	nameLen := 2
	switch root {
	case "data":
		nameLen = 3
	case "var", "local", "count", "each", "path", "self", "terraform":
		return bad("%s is not a resource, data source or module: depends_on takes only whole objects (TYPE.NAME, data.TYPE.NAME, module.NAME)", traversalString(tr))
	}
	for i := 1; i < nameLen; i++ {
		if attrName(tr, i) == "" {
			return bad("%s is not a resource, data source or module: depends_on takes only whole objects (TYPE.NAME, data.TYPE.NAME, module.NAME)", traversalString(tr))
		}
	}
	rest := tr[nameLen:]
	if len(rest) > 0 {
		if _, ok := rest[0].(hcl.TraverseIndex); ok {
			rest = rest[1:]
		}
	}
	if len(rest) > 0 {
		return bad("%s: references in depends_on must be to a whole object (resource, data source or module), not to an attribute of one", traversalString(tr))
	}
	switch root {
	case "module":
		name := attrName(tr, 1)
		if _, ok := mi.mod.Calls[name]; !ok {
			return bad("no module call %q is declared in %s", name, moduleWhere(mi))
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
					out = append(out, e.slot(ch, k))
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
		if _, ok := mi.mod.Resources[key]; !ok {
			return bad("no data source %s is declared in %s", key, moduleWhere(mi))
		}
		return []*resSlot{e.slot(mi, key)}
	}
	key := root + "." + attrName(tr, 1)
	if _, ok := mi.mod.Resources[key]; !ok {
		return bad("no resource %s is declared in %s", key, moduleWhere(mi))
	}
	return []*resSlot{e.slot(mi, key)}
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
//
// The instances of a resource share their slot's dependencies, so the sorted list of the
// dependency slots' instances is built once per slot and shared (capacity-limited, so that an
// append copies) by every instance whose typed references add nothing to it. Slots hold
// disjoint instances, so that list has no duplicates.
func (e *evaluator) link() {
	byKey := make(map[string]*ResourceInstance, len(e.instances))
	for _, ri := range e.instances {
		byKey[ri.Addr.UniqueKey()] = ri
	}
	shared := map[*resSlot][]addrs.Instance{}
	indexed := map[string][]addrs.Instance{} // lists of indexed dependencies, shared when equal
	for _, ri := range e.instances {
		if len(ri.indexed) > 0 {
			ri.DependsOn = e.indexedDeps(ri, byKey, indexed)
			continue
		}
		deps, ok := shared[ri.slot]
		if !ok {
			deps = slotDeps(ri.slot, nil)
			if !slices.Contains(ri.slot.deps, ri.slot) { // else each instance leaves itself out
				shared[ri.slot] = deps
			}
		}
		if slices.Contains(ri.slot.deps, ri.slot) {
			deps = slotDeps(ri.slot, ri)
		}
		var extra []addrs.Instance
		var added map[*ResourceInstance]struct{}
		for _, r := range ri.typed {
			t, ok := e.typedTarget(ri, r, byKey)
			if !ok {
				continue
			}
			if t == ri || slices.Contains(ri.slot.deps, t.slot) {
				continue
			}
			if added == nil {
				added = map[*ResourceInstance]struct{}{}
			}
			if _, dup := added[t]; dup {
				continue
			}
			added[t] = struct{}{}
			extra = append(extra, r.Addr)
		}
		if len(extra) > 0 {
			deps = append(slices.Clone(deps), extra...)
			slices.SortFunc(deps, addrs.Instance.Compare)
			deps = deps[:len(deps):len(deps)]
		}
		ri.DependsOn = deps
	}
}

// typedTarget is the instance a typed reference of ri names; a missing one is reported.
func (e *evaluator) typedTarget(ri *ResourceInstance, r Reference, byKey map[string]*ResourceInstance) (*ResourceInstance, bool) {
	t, ok := byKey[r.Addr.UniqueKey()]
	if !ok {
		e.errf(r.Range.Ptr(), "Reference to a missing resource instance", "%s: %s names %s, which the configuration does not declare", ri.Addr, r.Attr, r.Addr)
	}
	return t, ok
}

// indexedDeps is link for an instance that names some resources only through indexes
// (ri.indexed): of those it depends on the instances named, of the others on all instances, as
// well as on its typed references. Equal lists are shared (many instances name the same few).
func (e *evaluator) indexedDeps(ri *ResourceInstance, byKey map[string]*ResourceInstance, interned map[string][]addrs.Instance) []addrs.Instance {
	var deps []addrs.Instance
	seen := map[*ResourceInstance]bool{ri: true}
	add := func(t *ResourceInstance) {
		if !seen[t] {
			seen[t] = true
			deps = append(deps, t.Addr)
		}
	}
	for _, d := range ri.slot.deps {
		insts := d.insts
		if i := slices.IndexFunc(ri.indexed, func(ii indexedInsts) bool { return ii.slot == d }); i >= 0 {
			insts = ri.indexed[i].insts
		}
		for _, di := range insts {
			add(di)
		}
	}
	for _, r := range ri.typed {
		if t, ok := e.typedTarget(ri, r, byKey); ok {
			add(t)
		}
	}
	if len(deps) == 0 {
		return nil
	}
	slices.SortFunc(deps, addrs.Instance.Compare)
	var b strings.Builder
	for _, d := range deps {
		b.WriteString(d.UniqueKey())
		b.WriteByte(0)
	}
	if l, ok := interned[b.String()]; ok {
		return l
	}
	deps = deps[:len(deps):len(deps)]
	interned[b.String()] = deps
	return deps
}

// slotDeps returns the sorted instances of s's dependency slots, without skip; nil if none.
func slotDeps(s *resSlot, skip *ResourceInstance) []addrs.Instance {
	n := 0
	for _, d := range s.deps {
		n += len(d.insts)
	}
	if n == 0 {
		return nil
	}
	deps := make([]addrs.Instance, 0, n)
	for _, d := range s.deps {
		for _, di := range d.insts {
			if di != skip {
				deps = append(deps, di.Addr)
			}
		}
	}
	if len(deps) == 0 {
		return nil
	}
	slices.SortFunc(deps, addrs.Instance.Compare)
	return deps[:len(deps):len(deps)]
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

// isReference reports whether v is a resource object as seen by expressions.
func isReference(v cty.Value) bool {
	ty := v.Type()
	if !ty.IsObjectType() || !ty.HasAttribute("address") || v.IsNull() {
		return false
	}
	a := v.GetAttr("address")
	return a.Type() == cty.String && a.IsKnown() && !a.IsNull()
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
			if key, _ := resourceKey(tr); key != "" {
				r[key] = true
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
		note(res.refs()) // dynamic blocks' for_each and content included
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
// apply outside references to other resources (references are consumed by address only).
func scanValue(v cty.Value) (marked bool, unknownAt cty.Path, hasUnknown bool) {
	if !needsScan(v, true) {
		return false, nil, false // the common case: no path allocations
	}
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

// metaArgs are a resource body's meta-arguments (resourceMeta's attributes), hidden from its
// schema.
var metaArgs = func() map[string]bool {
	m := map[string]bool{}
	for _, a := range resourceMeta.Attributes {
		m[a.Name] = true
	}
	return m
}()

// bodyVariables lists the references of a native-syntax body (attributes and nested blocks,
// recursively); other bodies go through hcldec.
func bodyVariables(b hcl.Body, spec hcldec.Spec) []hcl.Traversal {
	sb, ok := b.(*hclsyntax.Body)
	if !ok {
		if spec == nil {
			return nil // Load parses native syntax only; other bodies do not occur
		}
		return hcldec.Variables(b, spec)
	}
	var out []hcl.Traversal
	var walk func(*hclsyntax.Body, bool)
	walk = func(sb *hclsyntax.Body, top bool) {
		for name, a := range sb.Attributes {
			if top && metaArgs[name] {
				continue // count, for_each, depends_on are handled on their own
			}
			out = exprVariables(out, a.Expr)
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

// exprVariables appends expr.Variables() to out. Plain values, references, and templates and
// tuples of them (most of a topology) are read here, without Variables' walker and its
// callback; what else they hold goes to Variables. None of these opens a scope of its own
// (only a for expression does), so what is found beneath them is a reference of the body.
func exprVariables(out []hcl.Traversal, expr hclsyntax.Expression) []hcl.Traversal {
	switch e := expr.(type) {
	case *hclsyntax.LiteralValueExpr:
		return out
	case *hclsyntax.ScopeTraversalExpr:
		return append(out, e.Traversal)
	case *hclsyntax.TemplateExpr:
		for _, p := range e.Parts {
			out = exprVariables(out, p)
		}
		return out
	case *hclsyntax.TupleConsExpr:
		for _, x := range e.Exprs {
			out = exprVariables(out, x)
		}
		return out
	}
	return append(out, expr.Variables()...)
}

// needsScan reports whether v holds a mark or a value known only after apply outside
// references (the conditions scanValue locates), without building paths.
func needsScan(v cty.Value, top bool) bool {
	if v.IsMarked() || !v.IsKnown() {
		return true
	}
	if v.IsNull() {
		return false
	}
	if !top && isReference(v) {
		return false
	}
	ty := v.Type()
	switch {
	case ty.IsObjectType():
		// In any order: an object's ElementIterator sorts its attribute names (a slice and a
		// sort per object, three objects per node).
		for name := range ty.AttributeTypes() {
			if needsScan(v.GetAttr(name), false) {
				return true
			}
		}
	case ty.IsTupleType() || ty.IsListType() || ty.IsMapType() || ty.IsSetType():
		for it := v.ElementIterator(); it.Next(); {
			if _, e := it.Element(); needsScan(e, false) {
				return true
			}
		}
	}
	return false
}
