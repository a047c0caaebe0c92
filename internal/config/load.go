package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"zyvor.dev/sysbox/internal/addrs"
)

// FileSuffix is the suffix of topology files.
const FileSuffix = ".sysbox.hcl"

// Module is the static (unevaluated) content of one module directory.
type Module struct {
	Dir       string // directory as given (root: as passed to Load; children: joined)
	Substrate *Substrate
	Variables map[string]*Variable
	Locals    map[string]*Local
	Calls     map[string]*Call
	Resources map[string]*Resource // by addrs.Resource.String()
	Outputs   map[string]*Output
	// order of declaration, for deterministic iteration
	localOrder    []string
	callOrder     []string
	resourceOrder []string
	outputOrder   []string
}

// Substrate is the `substrate` block: drivers, backend and parallelism.
type Substrate struct {
	Name        string
	Drivers     []*Block
	Backend     *Block
	Parallelism hcl.Expression
	DeclRange   hcl.Range
}

// Block is a labelled block whose attributes are evaluated without references to resources.
type Block struct {
	Label     string
	Attrs     hcl.Attributes
	DeclRange hcl.Range
}

// Variable is a `variable` block.
type Variable struct {
	Name        string
	Type        cty.Type
	Defaults    *typeexpr.Defaults
	Default     cty.Value // cty.NilVal when required
	Sensitive   bool
	Description string
	Validations []*Validation
	DeclRange   hcl.Range
}

// Validation is a variable's `validation` block.
type Validation struct {
	Condition    hcl.Expression
	ErrorMessage hcl.Expression
	DeclRange    hcl.Range
}

// Local is one attribute of a `locals` block.
type Local struct {
	Name  string
	Expr  hcl.Expression
	Range hcl.Range
}

// Call is a `module` block.
type Call struct {
	Name      string
	Source    string
	Count     hcl.Expression
	ForEach   hcl.Expression
	DependsOn []hcl.Traversal
	Args      hcl.Attributes
	Child     *Module
	DeclRange hcl.Range
}

// Resource is a `resource` or `data` block.
type Resource struct {
	Addr           addrs.Resource
	Count          hcl.Expression
	ForEach        hcl.Expression
	DependsOn      []hcl.Traversal
	PreventDestroy bool
	// Body is the block's body. Its meta-arguments (count, for_each, depends_on, provider,
	// lifecycle) are hidden unless metaVisible; schemaBody hides them.
	Body      hcl.Body
	DeclRange hcl.Range
	TypeRange hcl.Range

	// metaVisible: Body is the block's native-syntax body itself, meta-arguments included
	// (resourceContent). The fast decoder and bodyVariables skip them; hcldec and dynblock
	// get schemaBody.
	metaVisible bool

	bodyRefs    []hcl.Traversal // cached references of Body (see refs)
	bodyRefsSet bool

	indexRefsVal []indexRef // cached: see indexRefs
	indexRefsSet bool
}

// refs returns the references of the body (excluding meta-arguments), computed once.
func (r *Resource) refs() []hcl.Traversal {
	if !r.bodyRefsSet {
		r.bodyRefs, r.bodyRefsSet = bodyVariables(r.Body, nil), true
	}
	return r.bodyRefs
}

// Output is an `output` block.
type Output struct {
	Name        string
	Expr        hcl.Expression
	Sensitive   bool
	Description string
	DependsOn   []hcl.Traversal
	DeclRange   hcl.Range
}

// Sources are the files a configuration was read from, for the stored-plan fingerprint and for
// rendering diagnostics.
type Sources struct {
	Root  string            // root directory
	Files map[string][]byte // by path as opened (used as hcl.Range.Filename)
}

// Digest is the SHA-256 over every topology file's path (relative to the root) and exact bytes.
func (s *Sources) Digest() string {
	names := make([]string, 0, len(s.Files))
	for n := range s.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		rel, err := filepath.Rel(s.Root, n)
		if err != nil {
			rel = n
		}
		fmt.Fprintf(h, "%s\x00%d\x00", filepath.ToSlash(rel), len(s.Files[n]))
		h.Write(s.Files[n])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

var fileSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
	{Type: "substrate", LabelNames: []string{"name"}},
	{Type: "variable", LabelNames: []string{"name"}},
	{Type: "locals"},
	{Type: "module", LabelNames: []string{"name"}},
	{Type: "data", LabelNames: []string{"type", "name"}},
	{Type: "resource", LabelNames: []string{"type", "name"}},
	{Type: "output", LabelNames: []string{"name"}},
}}

// Load reads the topology in dir and every local module it calls.
func Load(dir string) (*Module, *Sources, hcl.Diagnostics) {
	l := &loader{src: &Sources{Root: dir, Files: map[string][]byte{}}}
	m, diags := l.load(dir, true, nil, hcl.Range{})
	return m, l.src, diags
}

type loader struct {
	src *Sources
}

func (l *loader) load(dir string, root bool, stack []string, callRange hcl.Range) (*Module, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	abs, _ := filepath.Abs(dir)
	for _, s := range stack {
		if s == abs {
			return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Module calls itself",
				Detail: fmt.Sprintf("module directory %s is already being loaded by a calling module (%s)", dir, strings.Join(stack, " → ")), Subject: rangePtr(callRange)}}
		}
	}
	stack = append(stack, abs)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Cannot read module directory",
			Detail: fmt.Sprintf("read %s: %v", dir, err), Subject: rangePtr(callRange)}}
	}
	m := &Module{Dir: dir, Variables: map[string]*Variable{}, Locals: map[string]*Local{}, Calls: map[string]*Call{},
		Resources: map[string]*Resource{}, Outputs: map[string]*Output{}}
	var files []string
	for _, e := range entries {
		// A directory or FIFO with the suffix is reported by ReadInput, not silently skipped.
		if strings.HasSuffix(e.Name(), FileSuffix) {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "No topology files",
			Detail: fmt.Sprintf("directory %s has no *%s files", dir, FileSuffix), Subject: rangePtr(callRange)}}
	}
	parsed := parseFiles(files)
	for i, fn := range files {
		p := parsed[i]
		if p.err != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Cannot read file", Detail: p.err.Error()})
			continue
		}
		l.src.Files[fn] = p.src
		diags = append(diags, p.diags...)
		if p.file == nil {
			continue
		}
		diags = append(diags, l.decodeFile(m, p.file.Body, root, stack)...)
	}
	return m, diags
}

type parsedFile struct {
	src   []byte
	file  *hcl.File
	diags hcl.Diagnostics
	err   error
}

// parseFiles reads and parses files on all CPUs (parsing dominates loading large topologies);
// results keep the files' order.
func parseFiles(files []string) []parsedFile {
	out := make([]parsedFile, len(files))
	work := make(chan int)
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), len(files))
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				b, err := ReadInput(files[i], MaxInputFile)
				if err != nil {
					out[i].err = err
					continue
				}
				f, d := parseConfig(b, files[i])
				out[i] = parsedFile{src: b, file: f, diags: d}
			}
		}()
	}
	for i := range files {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

func rangePtr(r hcl.Range) *hcl.Range {
	if r.Filename == "" {
		return nil
	}
	return &r
}

func dup(kind, name string, first, second hcl.Range) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate " + kind,
		Detail:  fmt.Sprintf("%s %q was already declared at %s; names must be unique in a module", kind, name, first),
		Subject: second.Ptr()}
}

func (l *loader) decodeFile(m *Module, body hcl.Body, root bool, stack []string) hcl.Diagnostics {
	content, diags := body.Content(fileSchema)
	for _, b := range content.Blocks {
		switch b.Type {
		case "substrate":
			diags = append(diags, addSubstrate(m, b, root)...)
		case "variable":
			diags = append(diags, addVariable(m, b)...)
		case "locals":
			diags = append(diags, addLocals(m, b)...)
		case "module":
			diags = append(diags, l.addCall(m, b, stack)...)
		case "data", "resource":
			diags = append(diags, addResource(m, b)...)
		case "output":
			diags = append(diags, addOutput(m, b)...)
		}
	}
	return diags
}

// addSubstrate decodes a substrate block into m: one, in the root module only.
func addSubstrate(m *Module, b *hcl.Block, root bool) hcl.Diagnostics {
	if !root {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Substrate in a child module",
			Detail: "a substrate block is only allowed in the root module", Subject: b.DefRange.Ptr()}}
	}
	if m.Substrate != nil {
		return hcl.Diagnostics{dup("substrate", b.Labels[0], m.Substrate.DeclRange, b.DefRange)}
	}
	s, diags := decodeSubstrate(b)
	m.Substrate = s
	return diags
}

func addVariable(m *Module, b *hcl.Block) hcl.Diagnostics {
	v, diags := decodeVariable(b)
	if v == nil {
		return diags
	}
	if prev, ok := m.Variables[v.Name]; ok {
		return append(diags, dup("variable", v.Name, prev.DeclRange, v.DeclRange))
	}
	m.Variables[v.Name] = v
	return diags
}

// addLocals adds a locals block's values to m in source order (the order evaluation reports in).
func addLocals(m *Module, b *hcl.Block) hcl.Diagnostics {
	attrs, diags := b.Body.JustAttributes()
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return attrs[names[i]].Range.Start.Byte < attrs[names[j]].Range.Start.Byte })
	for _, n := range names {
		a := attrs[n]
		if prev, ok := m.Locals[n]; ok {
			diags = append(diags, dup("local value", n, prev.Range, a.Range))
			continue
		}
		m.Locals[n] = &Local{Name: n, Expr: a.Expr, Range: a.Range}
		m.localOrder = append(m.localOrder, n)
	}
	return diags
}

func (l *loader) addCall(m *Module, b *hcl.Block, stack []string) hcl.Diagnostics {
	c, diags := l.decodeCall(m, b, stack)
	if c == nil {
		return diags
	}
	if prev, ok := m.Calls[c.Name]; ok {
		return append(diags, dup("module call", c.Name, prev.DeclRange, c.DeclRange))
	}
	m.Calls[c.Name] = c
	m.callOrder = append(m.callOrder, c.Name)
	return diags
}

func addResource(m *Module, b *hcl.Block) hcl.Diagnostics {
	r, diags := decodeResource(b)
	if r == nil {
		return diags
	}
	k := r.Addr.String()
	if prev, ok := m.Resources[k]; ok {
		return append(diags, dup(b.Type, k, prev.DeclRange, r.DeclRange))
	}
	m.Resources[k] = r
	m.resourceOrder = append(m.resourceOrder, k)
	return diags
}

func addOutput(m *Module, b *hcl.Block) hcl.Diagnostics {
	o, diags := decodeOutput(b)
	if o == nil {
		return diags
	}
	if prev, ok := m.Outputs[o.Name]; ok {
		return append(diags, dup("output", o.Name, prev.DeclRange, o.DeclRange))
	}
	m.Outputs[o.Name] = o
	m.outputOrder = append(m.outputOrder, o.Name)
	return diags
}

func checkName(kind, name string, r hcl.Range) hcl.Diagnostics {
	if !validIdentifier(name) {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid " + kind + " name",
			Detail: fmt.Sprintf("%q is not a valid name: expected a letter or underscore followed by letters, digits, underscores or dashes", name), Subject: r.Ptr()}}
	}
	return nil
}

// validIdentifier is hclsyntax.ValidIdentifier, which runs the lexer (a token slice, grapheme
// segmentation) for every name, twice per resource; an ASCII name is checked here directly.
func validIdentifier(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return hclsyntax.ValidIdentifier(s)
		}
	}
	if s == "" || !isIdentStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isIdentByte(s[i]) {
			return false
		}
	}
	return true
}

var substrateSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "parallelism"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "driver", LabelNames: []string{"name"}}, {Type: "backend", LabelNames: []string{"type"}}},
}

func decodeSubstrate(b *hcl.Block) (*Substrate, hcl.Diagnostics) {
	s := &Substrate{Name: b.Labels[0], DeclRange: b.DefRange}
	content, diags := b.Body.Content(substrateSchema)
	if a, ok := content.Attributes["parallelism"]; ok {
		s.Parallelism = a.Expr
	}
	seen := map[string]hcl.Range{}
	for _, blk := range content.Blocks {
		attrs, d := blk.Body.JustAttributes()
		diags = append(diags, d...)
		x := &Block{Label: blk.Labels[0], Attrs: attrs, DeclRange: blk.DefRange}
		switch blk.Type {
		case "driver":
			if prev, ok := seen[x.Label]; ok {
				diags = append(diags, dup("driver", x.Label, prev, blk.DefRange))
				continue
			}
			seen[x.Label] = blk.DefRange
			s.Drivers = append(s.Drivers, x)
		case "backend":
			if s.Backend != nil {
				diags = append(diags, dup("backend", x.Label, s.Backend.DeclRange, blk.DefRange))
				continue
			}
			s.Backend = x
		}
	}
	return s, diags
}

var variableSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "type"}, {Name: "default"}, {Name: "sensitive"}, {Name: "description"}, {Name: "nullable"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "validation"}},
}

var validationSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "condition", Required: true}, {Name: "error_message", Required: true}}}

func decodeVariable(b *hcl.Block) (*Variable, hcl.Diagnostics) {
	v := &Variable{Name: b.Labels[0], Type: cty.DynamicPseudoType, DeclRange: b.DefRange}
	diags := checkName("variable", v.Name, b.LabelRanges[0])
	content, d := b.Body.Content(variableSchema)
	diags = append(diags, d...)
	if a, ok := content.Attributes["type"]; ok {
		ty, defs, d := typeexpr.TypeConstraintWithDefaults(a.Expr)
		diags = append(diags, d...)
		v.Type, v.Defaults = ty, defs
	}
	if a, ok := content.Attributes["sensitive"]; ok {
		diags = append(diags, constBool(a, &v.Sensitive)...)
	}
	if a, ok := content.Attributes["description"]; ok {
		val, d := a.Expr.Value(nil)
		diags = append(diags, d...)
		if !d.HasErrors() && val.Type() == cty.String && val.IsKnown() && !val.IsNull() {
			v.Description = val.AsString()
		}
	}
	if a, ok := content.Attributes["default"]; ok {
		val, d := a.Expr.Value(&hcl.EvalContext{Functions: staticFuncs()})
		diags = append(diags, d...)
		if !d.HasErrors() {
			cv, err := convertVar(v, val)
			if err != nil {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid default value for variable",
					Detail: fmt.Sprintf("variable %q: default does not match type %s: %v", v.Name, typeexpr.TypeString(v.Type), err), Subject: a.Expr.Range().Ptr()})
			} else {
				v.Default = cv
			}
		}
	}
	for _, blk := range content.Blocks {
		vc, d := blk.Body.Content(validationSchema)
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		v.Validations = append(v.Validations, &Validation{Condition: vc.Attributes["condition"].Expr,
			ErrorMessage: vc.Attributes["error_message"].Expr, DeclRange: blk.DefRange})
	}
	return v, diags
}

func constBool(a *hcl.Attribute, dst *bool) hcl.Diagnostics {
	val, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		return diags
	}
	if val.Type() != cty.Bool || val.IsNull() || !val.IsKnown() {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid value", Detail: fmt.Sprintf("%s must be true or false", a.Name), Subject: a.Expr.Range().Ptr()}}
	}
	*dst = val.True()
	return nil
}

var callMeta = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "source", Required: true}, {Name: "count"}, {Name: "for_each"}, {Name: "depends_on"}, {Name: "version"}, {Name: "providers"}}}

func (l *loader) decodeCall(parent *Module, b *hcl.Block, stack []string) (*Call, hcl.Diagnostics) {
	c := &Call{Name: b.Labels[0], DeclRange: b.DefRange}
	diags := checkName("module", c.Name, b.LabelRanges[0])
	content, remain, d := b.Body.PartialContent(callMeta)
	diags = append(diags, d...)
	if d.HasErrors() {
		return nil, diags
	}
	for _, n := range []string{"version", "providers"} {
		if a, ok := content.Attributes[n]; ok {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported argument",
				Detail: fmt.Sprintf("module %q: %q is not supported: sysbox modules are local directories", c.Name, n), Subject: a.NameRange.Ptr()})
		}
	}
	src := content.Attributes["source"]
	sv, d := src.Expr.Value(nil)
	if d.HasErrors() || sv.Type() != cty.String || sv.IsNull() {
		return nil, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid module source",
			Detail: "source must be a literal string naming a local directory (\"./modules/x\")", Subject: src.Expr.Range().Ptr()})
	}
	c.Source = sv.AsString()
	if !strings.HasPrefix(c.Source, "./") && !strings.HasPrefix(c.Source, "../") {
		return nil, append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid module source",
			Detail: fmt.Sprintf("module %q: source %q must be a local path starting with ./ or ../ (registries are not supported)", c.Name, c.Source), Subject: src.Expr.Range().Ptr()})
	}
	c.Count, c.ForEach, c.DependsOn, d = decodeRepetition(content)
	diags = append(diags, d...)
	args, d := remain.JustAttributes()
	diags = append(diags, d...)
	c.Args = args
	child, d := l.load(filepath.Join(parent.Dir, c.Source), false, stack, src.Expr.Range())
	diags = append(diags, d...)
	c.Child = child
	if child == nil {
		return nil, diags
	}
	return c, diags
}

// decodeRepetition reads the meta-arguments modules and resources share: count, for_each (not
// both) and depends_on.
func decodeRepetition(content *hcl.BodyContent) (count, forEach hcl.Expression, dependsOn []hcl.Traversal, diags hcl.Diagnostics) {
	if a, ok := content.Attributes["count"]; ok {
		count = a.Expr
	}
	if a, ok := content.Attributes["for_each"]; ok {
		if count != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid combination of count and for_each",
				Detail: "count and for_each cannot both be set", Subject: a.NameRange.Ptr()})
		}
		forEach = a.Expr
	}
	if a, ok := content.Attributes["depends_on"]; ok {
		var d hcl.Diagnostics
		dependsOn, d = decodeDependsOn(a)
		diags = append(diags, d...)
	}
	return count, forEach, dependsOn, diags
}

func decodeDependsOn(a *hcl.Attribute) ([]hcl.Traversal, hcl.Diagnostics) {
	exprs, diags := hcl.ExprList(a.Expr)
	var out []hcl.Traversal
	for _, e := range exprs {
		tr, d := hcl.AbsTraversalForExpr(e)
		if d.HasErrors() {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid depends_on reference",
				Detail: "depends_on takes references to resources, data sources or modules (sysbox_node.web, module.lab), not expressions", Subject: e.Range().Ptr()})
			continue
		}
		out = append(out, tr)
	}
	return out, diags
}

var resourceMeta = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "count"}, {Name: "for_each"}, {Name: "depends_on"}, {Name: "provider"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "lifecycle"}},
}

// resourceContent is body.PartialContent(resourceMeta) (visible false), except for a
// native-syntax body without a lifecycle block or argument (nearly every resource), where
// it returns the same content and diagnostics (none) with the body itself as the remainder
// (visible true): PartialContent's remainder is a copy of the body with two maps of hidden
// names, and four maps of the content besides, about 0.6 KB per resource kept live.
func resourceContent(body hcl.Body) (*hcl.BodyContent, hcl.Body, bool, hcl.Diagnostics) {
	sb, native := body.(*hclsyntax.Body)
	if !native || hasLifecycle(sb) {
		content, remain, d := body.PartialContent(resourceMeta)
		return content, remain, false, d
	}
	content := &hcl.BodyContent{Attributes: hcl.Attributes{}, MissingItemRange: sb.MissingItemRange()}
	for _, a := range resourceMeta.Attributes {
		if attr, set := sb.Attributes[a.Name]; set {
			content.Attributes[a.Name] = attr.AsHCLAttribute()
		}
	}
	return content, sb, true, nil
}

// hasLifecycle reports whether sb has a lifecycle argument or block (of any labels).
func hasLifecycle(sb *hclsyntax.Body) bool {
	if _, ok := sb.Attributes["lifecycle"]; ok {
		return true
	}
	return slices.ContainsFunc(sb.Blocks, func(blk *hclsyntax.Block) bool { return blk.Type == "lifecycle" })
}

// schemaBody is Body with the meta-arguments hidden, as hcldec and dynblock must see it.
func (r *Resource) schemaBody() hcl.Body {
	if !r.metaVisible || r.Body == nil {
		return r.Body
	}
	_, remain, _ := r.Body.PartialContent(resourceMeta)
	return remain
}

var lifecycleSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "prevent_destroy"}, {Name: "create_before_destroy"}, {Name: "ignore_changes"}}}

func decodeResource(b *hcl.Block) (*Resource, hcl.Diagnostics) {
	mode := addrs.Managed
	if b.Type == "data" {
		mode = addrs.Data
	}
	r := &Resource{Addr: addrs.Resource{Mode: mode, Type: b.Labels[0], Name: b.Labels[1]}, DeclRange: b.DefRange, TypeRange: b.LabelRanges[0]}
	diags := checkName("resource type", r.Addr.Type, b.LabelRanges[0])
	diags = append(diags, checkName("resource", r.Addr.Name, b.LabelRanges[1])...)
	if r.Addr.Type == "data" || r.Addr.Type == "module" {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Reserved resource type", Detail: fmt.Sprintf("%q is reserved", r.Addr.Type), Subject: b.LabelRanges[0].Ptr()})
	}
	if diags.HasErrors() {
		return nil, diags
	}
	content, remain, visible, d := resourceContent(b.Body)
	diags = append(diags, d...)
	r.Body, r.metaVisible = remain, visible
	if a, ok := content.Attributes["provider"]; ok {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported argument",
			Detail: "provider is not a sysbox argument: choose the driver with the resource's driver attribute", Subject: a.NameRange.Ptr()})
	}
	r.Count, r.ForEach, r.DependsOn, d = decodeRepetition(content)
	diags = append(diags, d...)
	for _, blk := range content.Blocks {
		if mode == addrs.Data {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported block", Detail: "data sources have no lifecycle block", Subject: blk.DefRange.Ptr()})
			continue
		}
		lc, d := blk.Body.Content(lifecycleSchema)
		diags = append(diags, d...)
		for n, a := range lc.Attributes {
			if n != "prevent_destroy" {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Unsupported lifecycle argument",
					Detail: fmt.Sprintf("lifecycle.%s is not supported by sysbox (only prevent_destroy)", n), Subject: a.NameRange.Ptr()})
				continue
			}
			diags = append(diags, constBool(a, &r.PreventDestroy)...)
		}
	}
	return r, diags
}

var outputSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "value", Required: true}, {Name: "sensitive"}, {Name: "description"}, {Name: "depends_on"}}}

func decodeOutput(b *hcl.Block) (*Output, hcl.Diagnostics) {
	o := &Output{Name: b.Labels[0], DeclRange: b.DefRange}
	diags := checkName("output", o.Name, b.LabelRanges[0])
	content, d := b.Body.Content(outputSchema)
	diags = append(diags, d...)
	if d.HasErrors() {
		return nil, diags
	}
	o.Expr = content.Attributes["value"].Expr
	if a, ok := content.Attributes["sensitive"]; ok {
		diags = append(diags, constBool(a, &o.Sensitive)...)
	}
	if a, ok := content.Attributes["depends_on"]; ok {
		tr, d := decodeDependsOn(a)
		diags = append(diags, d...)
		o.DependsOn = tr
	}
	return o, diags
}
