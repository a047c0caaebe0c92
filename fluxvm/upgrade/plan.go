package upgrade

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
	"zyvor.dev/sysbox/internal/durable"
)

// Defaults from F1.
const (
	DefaultStateDir    = "/var/lib/fluxvm/sentinel-upgrades"
	DefaultBPFFSRoot   = "/sys/fs/bpf"
	DefaultHookTimeout = 5 * time.Minute
)

// ErrInvalidPlan is wrapped by every plan decoding or validation failure.
var ErrInvalidPlan = errors.New("invalid plan")

// Plan is a decoded, validated upgrade plan (F1).
type Plan struct {
	TransactionID string      `json:"transaction_id"`
	StateDir      string      `json:"state_dir"`
	BPFFSRoot     string      `json:"bpffs_root"`
	Components    []Component `json:"components"`
	Signing       *Signing    `json:"signing,omitempty"`

	// Source is the plan file as read; SHA256 is the hex SHA-256 of its canonical form (F3).
	Source    []byte `json:"-"`
	Canonical []byte `json:"-"`
	SHA256    string `json:"-"`
	File      string `json:"-"`
}

// Signing names the key used for `ssh-keygen -Y sign`; the key is referenced, never copied.
type Signing struct {
	SSHPrivateKey string `json:"ssh_private_key"`
	Namespace     string `json:"namespace"`
}

// Component is one upgradable unit.
type Component struct {
	Name     string    `json:"name"`
	Hooks    Hooks     `json:"hooks"`
	Files    []string  `json:"files,omitempty"`
	Maps     []Map     `json:"maps,omitempty"`
	StateABI *StateABI `json:"state_abi,omitempty"`
}

// Hooks are the component's operator-supplied commands. RollbackHealth is optional.
type Hooks struct {
	Preflight      *Hook `json:"preflight"`
	Apply          *Hook `json:"apply"`
	Health         *Hook `json:"health"`
	Rollback       *Hook `json:"rollback"`
	RollbackHealth *Hook `json:"rollback_health,omitempty"`
}

// Hook is an argv run without a shell.
type Hook struct {
	Argv    []string      `json:"argv"`
	Timeout time.Duration `json:"timeout"`
}

// Map is a declared pinned map; Pin is absolute (resolved beneath the plan's bpffs_root).
type Map struct {
	Name     string        `json:"name"`
	Pin      string        `json:"pin"`
	Policy   bpfmap.Policy `json:"policy"`
	Declared bpfmap.ABI    `json:"abi"`
}

// StateABI is the logical state ABI gate (F8).
type StateABI struct {
	Current              int64   `json:"current"`
	Target               int64   `json:"target"`
	TargetCompatibleFrom []int64 `json:"target_compatible_from"`
}

// Spec returns the bpfmap view of a declared map.
func (p *Plan) Spec(c *Component, m *Map) bpfmap.Spec {
	return bpfmap.Spec{Component: c.Name, Name: m.Name, Pin: m.Pin, BPFFSRoot: p.BPFFSRoot, Policy: m.Policy, Declared: m.Declared}
}

// Problem is one thing wrong with a plan, located by JSON path and source position.
type Problem struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"column,omitempty"`
	Msg  string `json:"message"`
}

// ValidationError lists every problem found in a plan file (F2).
type ValidationError struct {
	File     string
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: invalid plan (%d problem", e.File, len(e.Problems))
	if len(e.Problems) != 1 {
		b.WriteString("s")
	}
	b.WriteString(")")
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String(e.File))
	}
	return b.String()
}

// String renders "file:line:col: path: message".
func (p Problem) String(file string) string {
	loc := file
	if p.Line > 0 {
		loc = fmt.Sprintf("%s:%d:%d", file, p.Line, p.Col)
	}
	return fmt.Sprintf("%s: %s: %s", loc, p.Path, p.Msg)
}

func (e *ValidationError) Unwrap() error { return ErrInvalidPlan }

var txIDPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ValidTransactionID reports whether id is usable as a transaction id and directory name.
func ValidTransactionID(id string) error {
	if !txIDPattern.MatchString(id) {
		return fmt.Errorf("transaction id %q: must be 1-128 characters of [A-Za-z0-9._-]", id)
	}
	if id == "." || id == ".." {
		return fmt.Errorf("transaction id %q: must not be a relative directory name", id)
	}
	return nil
}

// LoadPlan reads, decodes and validates a plan file.
func LoadPlan(path string) (*Plan, error) {
	// The reader's errors name the path already.
	data, err := durable.ReadInputFile(path, MaxPlanSize)
	if errors.Is(err, durable.ErrTooLarge) {
		return nil, fmt.Errorf("plan: %w: %w", ErrInvalidPlan, err)
	}
	if err != nil {
		return nil, fmt.Errorf("plan: %w", err)
	}
	return ParsePlan(path, data)
}

// MaxPlanSize bounds a plan file; real plans are a few kilobytes.
const MaxPlanSize = 16 << 20

// ParsePlan decodes and validates plan source; every problem is reported at once in a
// *ValidationError. Validation reads the file system only to resolve existing map pin paths
// (symlink escape check).
func ParsePlan(file string, data []byte) (*Plan, error) {
	d := &decoder{file: file, src: data}
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, n := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		d.addAt("$", int64(off), "not valid UTF-8 (byte %d)", off)
		return nil, d.err()
	}
	root, err := parseJSON(data)
	if err != nil {
		var se *syntaxError
		off, path := int64(0), "$"
		if errors.As(err, &se) {
			off = se.off
			if se.path != "" {
				path = se.path
			}
		}
		d.addAt(path, off, "malformed JSON: %v", err)
		return nil, d.err()
	}
	p := d.plan(root)
	if len(d.problems) > 0 {
		return nil, d.err()
	}
	canon, err := Canonicalize(data)
	if err != nil {
		d.addAt("$", 0, "%v", err)
		return nil, d.err()
	}
	sum := sha256.Sum256(canon)
	p.Source, p.Canonical, p.SHA256, p.File = data, canon, hex.EncodeToString(sum[:]), file
	return p, nil
}

type decoder struct {
	file     string
	src      []byte
	problems []Problem
}

func (d *decoder) err() error {
	return &ValidationError{File: d.file, Problems: d.problems}
}

func (d *decoder) addAt(path string, off int64, format string, args ...any) {
	l, c := lineCol(d.src, off)
	d.problems = append(d.problems, Problem{Path: path, Line: l, Col: c, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) add(path string, n *node, format string, args ...any) {
	d.addAt(path, n.off, format, args...)
}

// object checks n is an object whose keys are all known, returning member lookup.
func (d *decoder) object(path string, n *node, known ...string) map[string]*node {
	if n.kind != kindObject {
		d.add(path, n, "must be an object, got %s", n.kind)
		return nil
	}
	out := map[string]*node{}
	for _, f := range n.fields {
		ok := false
		for _, k := range known {
			if f.key == k {
				ok = true
			}
		}
		if !ok {
			d.addAt(path+"."+f.key, f.off, "unknown field %q (known: %s)", f.key, strings.Join(known, ", "))
			continue
		}
		out[f.key] = f.val
	}
	return out
}

func (d *decoder) str(path string, n *node) (string, bool) {
	if n.kind != kindString {
		d.add(path, n, "must be a string, got %s", n.kind)
		return "", false
	}
	return n.str, true
}

func (d *decoder) integer(path string, n *node, min, max int64) (int64, bool) {
	if n.kind != kindNumber {
		d.add(path, n, "must be an integer, got %s", n.kind)
		return 0, false
	}
	v, err := strconv.ParseInt(string(n.num), 10, 64)
	if err != nil || v < min || v > max {
		d.add(path, n, "must be an integer between %d and %d, got %s", min, max, n.num)
		return 0, false
	}
	return v, true
}

func (d *decoder) absPath(path string, n *node, what string) (string, bool) {
	s, ok := d.str(path, n)
	if !ok {
		return "", false
	}
	switch {
	case s == "":
		d.add(path, n, "%s must not be empty", what)
	case !filepath.IsAbs(s):
		d.add(path, n, "%s %q must be an absolute path", what, s)
	case hasDotDot(s):
		d.add(path, n, "%s %q must not contain '..'", what, s)
	case filepath.Clean(s) != s:
		d.add(path, n, "%s %q is not clean (want %q)", what, s, filepath.Clean(s))
	default:
		return s, true
	}
	return "", false
}

func hasDotDot(p string) bool {
	for _, el := range strings.Split(p, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

func (d *decoder) plan(root *node) *Plan {
	p := &Plan{StateDir: DefaultStateDir, BPFFSRoot: DefaultBPFFSRoot}
	m := d.object("$", root, "transaction_id", "state_dir", "bpffs_root", "components", "signing")
	if m == nil {
		return p
	}
	if n, ok := m["transaction_id"]; !ok {
		d.add("$.transaction_id", root, "missing required field")
	} else if s, ok := d.str("$.transaction_id", n); ok {
		if err := ValidTransactionID(s); err != nil {
			d.add("$.transaction_id", n, "%v", err)
		}
		p.TransactionID = s
	}
	if n, ok := m["state_dir"]; ok {
		if s, ok := d.absPath("$.state_dir", n, "state_dir"); ok {
			p.StateDir = s
		}
	}
	rootOK := true
	if n, ok := m["bpffs_root"]; ok {
		s, ok := d.absPath("$.bpffs_root", n, "bpffs_root")
		rootOK = ok
		if ok {
			p.BPFFSRoot = s
		}
	}
	if n, ok := m["signing"]; ok {
		p.Signing = d.signing("$.signing", n)
	}
	n, ok := m["components"]
	if !ok {
		d.add("$.components", root, "missing required field")
		return p
	}
	if n.kind != kindArray {
		d.add("$.components", n, "must be an array, got %s", n.kind)
		return p
	}
	if len(n.elems) == 0 {
		d.add("$.components", n, "must list at least one component")
	}
	names := map[string]string{}
	files := map[string]string{}
	pins := map[string]string{}
	for i, cn := range n.elems {
		path := fmt.Sprintf("$.components[%d]", i)
		c := d.component(path, cn, p, rootOK, files, pins)
		if c.Name != "" {
			if prev, dup := names[c.Name]; dup {
				d.add(path+".name", cn, "duplicate component name %q (also at %s)", c.Name, prev)
			}
			names[c.Name] = path
		}
		p.Components = append(p.Components, c)
	}
	return p
}

func (d *decoder) signing(path string, n *node) *Signing {
	m := d.object(path, n, "ssh_private_key", "namespace")
	if m == nil {
		return nil
	}
	s := &Signing{}
	if k, ok := m["ssh_private_key"]; !ok {
		d.add(path+".ssh_private_key", n, "missing required field")
	} else if v, ok := d.absPath(path+".ssh_private_key", k, "ssh_private_key"); ok {
		s.SSHPrivateKey = v
	}
	if k, ok := m["namespace"]; !ok {
		d.add(path+".namespace", n, "missing required field")
	} else if v, ok := d.str(path+".namespace", k); ok {
		if v == "" || strings.ContainsAny(v, " \t\n") {
			d.add(path+".namespace", k, "must be a non-empty string without whitespace")
		}
		s.Namespace = v
	}
	return s
}

var componentNamePattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// name reads the required "name" field of object m at path (a component's or a map's: what),
// reporting a missing or malformed one; "" then.
func (d *decoder) name(path string, n *node, m map[string]*node, what string) string {
	v, ok := m["name"]
	if !ok {
		d.add(path+".name", n, "missing required field")
		return ""
	}
	s, ok := d.str(path+".name", v)
	if !ok {
		return ""
	}
	if !componentNamePattern.MatchString(s) || s == "." || s == ".." {
		d.add(path+".name", v, "%s name %q must be 1-64 characters of [A-Za-z0-9._-]", what, s)
		return ""
	}
	return s
}

func (d *decoder) component(path string, n *node, p *Plan, rootOK bool, files, pins map[string]string) Component {
	var c Component
	m := d.object(path, n, "name", "hooks", "files", "maps", "state_abi")
	if m == nil {
		return c
	}
	c.Name = d.name(path, n, m, "component")
	if v, ok := m["hooks"]; !ok {
		d.add(path+".hooks", n, "missing required field")
	} else {
		c.Hooks = d.hooks(path+".hooks", v)
	}
	if v, ok := m["files"]; ok {
		if v.kind != kindArray {
			d.add(path+".files", v, "must be an array of absolute paths, got %s", v.kind)
		} else {
			for i, fn := range v.elems {
				fp := fmt.Sprintf("%s.files[%d]", path, i)
				if s, ok := d.absPath(fp, fn, "file"); ok {
					if prev, dup := files[s]; dup {
						d.add(fp, fn, "file %q is already declared at %s", s, prev)
					}
					files[s] = fp
					c.Files = append(c.Files, s)
				}
			}
		}
	}
	if v, ok := m["maps"]; ok {
		if v.kind != kindArray {
			d.add(path+".maps", v, "must be an array, got %s", v.kind)
		} else {
			names := map[string]bool{}
			for i, mn := range v.elems {
				mp := fmt.Sprintf("%s.maps[%d]", path, i)
				mm := d.mapDecl(mp, mn, p, rootOK)
				if mm.Name != "" {
					if names[mm.Name] {
						d.add(mp+".name", mn, "duplicate map name %q in component %q", mm.Name, c.Name)
					}
					names[mm.Name] = true
				}
				if mm.Pin != "" {
					if prev, dup := pins[mm.Pin]; dup {
						d.add(mp+".pin", mn, "pin %q is already declared at %s", mm.Pin, prev)
					}
					pins[mm.Pin] = mp
				}
				c.Maps = append(c.Maps, mm)
			}
		}
	}
	if v, ok := m["state_abi"]; ok {
		c.StateABI = d.stateABI(path+".state_abi", v)
	}
	return c
}

func (d *decoder) hooks(path string, n *node) Hooks {
	var h Hooks
	m := d.object(path, n, "preflight", "apply", "health", "rollback", "rollback_health")
	if m == nil {
		return h
	}
	for _, x := range []struct {
		name     string
		dst      **Hook
		required bool
	}{
		{"preflight", &h.Preflight, true},
		{"apply", &h.Apply, true},
		{"health", &h.Health, true},
		{"rollback", &h.Rollback, true},
		{"rollback_health", &h.RollbackHealth, false},
	} {
		v, ok := m[x.name]
		if !ok {
			if x.required {
				d.add(path+"."+x.name, n, "missing required hook")
			}
			continue
		}
		*x.dst = d.hook(path+"."+x.name, v)
	}
	return h
}

// hook accepts either an argv array or {"argv": [...], "timeout_seconds": N}.
func (d *decoder) hook(path string, n *node) *Hook {
	h := &Hook{Timeout: DefaultHookTimeout}
	argvNode := n
	argvPath := path
	if n.kind == kindObject {
		m := d.object(path, n, "argv", "timeout_seconds")
		if t, ok := m["timeout_seconds"]; ok {
			if s, ok := d.integer(path+".timeout_seconds", t, 1, 86400); ok {
				h.Timeout = time.Duration(s) * time.Second
			}
		}
		a, ok := m["argv"]
		if !ok {
			d.add(path+".argv", n, "missing required field")
			return nil
		}
		argvNode, argvPath = a, path+".argv"
	}
	if argvNode.kind != kindArray {
		d.add(argvPath, argvNode, "must be a JSON argv array of strings (no shell), got %s", argvNode.kind)
		return nil
	}
	if len(argvNode.elems) == 0 {
		d.add(argvPath, argvNode, "argv must not be empty")
		return nil
	}
	ok := true
	for i, e := range argvNode.elems {
		ep := fmt.Sprintf("%s[%d]", argvPath, i)
		s, sok := d.str(ep, e)
		if !sok {
			ok = false
			continue
		}
		if strings.ContainsRune(s, 0) {
			d.add(ep, e, "argument contains a NUL byte")
			ok = false
		}
		if i == 0 && !filepath.IsAbs(s) {
			d.add(ep, e, "program %q must be an absolute path (hooks run without a shell or PATH search)", s)
			ok = false
		}
		h.Argv = append(h.Argv, s)
	}
	if !ok {
		return nil
	}
	return h
}

func (d *decoder) mapDecl(path string, n *node, p *Plan, rootOK bool) Map {
	var mm Map
	m := d.object(path, n, "name", "pin", "policy", "type", "key_size", "value_size", "max_entries")
	if m == nil {
		return mm
	}
	mm.Name = d.name(path, n, m, "map")
	if v, ok := m["pin"]; !ok {
		d.add(path+".pin", n, "missing required field")
	} else if s, ok := d.str(path+".pin", v); ok && rootOK {
		pin, err := ResolvePin(p.BPFFSRoot, s)
		if err != nil {
			d.add(path+".pin", v, "%v", err)
		} else {
			mm.Pin = pin
		}
	}
	if v, ok := m["policy"]; !ok {
		d.add(path+".policy", n, "missing required field (metadata-only, merge or replace)")
	} else if s, ok := d.str(path+".policy", v); ok {
		switch pol := bpfmap.Policy(s); pol {
		case bpfmap.MetadataOnly, bpfmap.Merge, bpfmap.Replace:
			mm.Policy = pol
		default:
			d.add(path+".policy", v, "unknown policy %q (want metadata-only, merge or replace)", s)
		}
	}
	if v, ok := m["type"]; ok {
		if s, ok := d.str(path+".type", v); ok {
			if t, err := bpfmap.NormalizeType(s); err == nil {
				mm.Declared.Type = t
			} else {
				d.add(path+".type", v, "%v", err)
			}
		}
	}
	for _, x := range []struct {
		name string
		dst  *uint32
	}{{"key_size", &mm.Declared.KeySize}, {"value_size", &mm.Declared.ValueSize}, {"max_entries", &mm.Declared.MaxEntries}} {
		if v, ok := m[x.name]; ok {
			if i, ok := d.integer(path+"."+x.name, v, 1, math.MaxUint32); ok {
				*x.dst = uint32(i)
			}
		}
	}
	// F11: generic restore only for byte-array encodings.
	if mm.Declared.Type != "" && (mm.Policy == bpfmap.Merge || mm.Policy == bpfmap.Replace) {
		if err := bpfmap.CheckPolicy(mm.Declared.Type, mm.Policy); err != nil {
			d.add(path+".policy", m["policy"], "%v", err)
		}
	}
	return mm
}

func (d *decoder) stateABI(path string, n *node) *StateABI {
	m := d.object(path, n, "current", "target", "target_compatible_from")
	if m == nil {
		return nil
	}
	s := &StateABI{}
	ok := true
	for _, x := range []struct {
		name string
		dst  *int64
	}{{"current", &s.Current}, {"target", &s.Target}} {
		v, has := m[x.name]
		if !has {
			d.add(path+"."+x.name, n, "missing required field")
			ok = false
			continue
		}
		i, iok := d.integer(path+"."+x.name, v, 0, math.MaxInt32)
		ok = ok && iok
		*x.dst = i
	}
	if v, has := m["target_compatible_from"]; has {
		if v.kind != kindArray {
			d.add(path+".target_compatible_from", v, "must be an array of integers, got %s", v.kind)
			ok = false
		} else {
			for i, e := range v.elems {
				x, iok := d.integer(fmt.Sprintf("%s.target_compatible_from[%d]", path, i), e, 0, math.MaxInt32)
				ok = ok && iok
				s.TargetCompatibleFrom = append(s.TargetCompatibleFrom, x)
			}
		}
	}
	if ok {
		if err := s.Check(); err != nil {
			d.add(path, n, "%v", err)
		}
	}
	return s
}

// ErrLogicalABI is the F8 gate refusing an incompatible logical state ABI.
var ErrLogicalABI = errors.New("logical state ABI not compatible")

// Check applies the F8 gate.
func (s *StateABI) Check() error {
	if s == nil || s.Current == s.Target {
		return nil
	}
	for _, c := range s.TargetCompatibleFrom {
		if c == s.Current {
			return nil
		}
	}
	return fmt.Errorf("%w: current %d is not in target %d's target_compatible_from %v; run a component-specific migration first", ErrLogicalABI, s.Current, s.Target, s.TargetCompatibleFrom)
}

// ResolvePin resolves a declared pin (relative to root, or absolute beneath it) and refuses
// '..', absolute paths elsewhere and symlinks that lead outside root (F7).
func ResolvePin(root, pin string) (string, error) {
	if pin == "" {
		return "", fmt.Errorf("pin must not be empty")
	}
	if hasDotDot(pin) {
		return "", fmt.Errorf("pin %q must not contain '..': %w", pin, bpfmap.ErrPinEscape)
	}
	abs := pin
	if !filepath.IsAbs(pin) {
		abs = filepath.Join(root, pin)
	}
	abs = filepath.Clean(abs)
	if !within(root, abs) || abs == root {
		return "", fmt.Errorf("pin %q is not beneath bpffs_root %s: %w", pin, root, bpfmap.ErrPinEscape)
	}
	// Symlink escape: resolve the longest existing prefix and compare with the resolved root.
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return abs, nil // root absent: probe reports it; nothing to escape through yet
	}
	existing, rest := abs, ""
	for {
		if _, err := os.Lstat(existing); err == nil {
			break
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	if err != nil {
		return "", fmt.Errorf("pin %q: %w", pin, err)
	}
	real = filepath.Join(real, rest)
	if !within(realRoot, real) || real == realRoot {
		return "", fmt.Errorf("pin %q resolves through a symlink to %s, outside bpffs_root %s: %w", pin, real, root, bpfmap.ErrPinEscape)
	}
	return abs, nil
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}
