package config

import (
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// fileScope gives the file functions of one module. Every path is opened through an os.Root
// on the topology directory, so neither "..", an absolute path nor a symlink reaches a file
// outside it. A relative path is relative to the module's directory (OpenTofu: the working
// directory, which for a root module run with -chdir is the same).
type fileScope struct {
	root string // topology directory
	dir  string // module directory
}

// rel maps p to a path inside the topology directory, or explains why it is not in it.
func (s fileScope) rel(p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(s.dir, p)
	}
	absRoot, err := filepath.Abs(s.root)
	if err != nil {
		return "", err
	}
	absP, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	r, err := filepath.Rel(absRoot, absP)
	if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%s is outside the topology directory %s: file functions read only files inside it", p, absRoot)
	}
	return r, nil
}

func (s fileScope) open() (*os.Root, error) {
	r, err := os.OpenRoot(s.root)
	if err != nil {
		return nil, fmt.Errorf("open topology directory: %w", err)
	}
	return r, nil
}

func (s fileScope) read(p string) ([]byte, error) {
	rel, err := s.rel(p)
	if err != nil {
		return nil, err
	}
	r, err := s.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := r.ReadFile(rel)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	return b, nil
}

func (s fileScope) readText(p string) (string, error) {
	b, err := s.read(p)
	if err != nil {
		return "", err
	}
	if !utf8.Valid(b) {
		return "", fmt.Errorf("contents of %s are not valid UTF-8; use filebase64 to read it as base64", p)
	}
	return string(b), nil
}

func (s fileScope) pathFunc(desc string, ret cty.Type, f func(p string) (cty.Value, error)) function.Function {
	return function.New(&function.Spec{
		Description: desc,
		Params:      []function.Parameter{{Name: "path", Type: cty.String}},
		Type:        function.StaticReturnType(ret),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			v, err := f(args[0].AsString())
			if err != nil {
				return cty.UnknownVal(ret), function.NewArgError(0, err)
			}
			return v, nil
		},
	})
}

func (s fileScope) hashFunc(desc string, h func() hash.Hash, enc func([]byte) string) function.Function {
	return s.pathFunc(desc, cty.String, func(p string) (cty.Value, error) {
		b, err := s.read(p)
		if err != nil {
			return cty.NilVal, err
		}
		hh := h()
		hh.Write(b)
		return cty.StringVal(enc(hh.Sum(nil))), nil
	})
}

// funcs returns the file functions; lib is the function table templates are rendered with.
func (s fileScope) funcs(lib map[string]function.Function) map[string]function.Function {
	b64 := base64.StdEncoding.EncodeToString
	out := map[string]function.Function{
		"file": s.pathFunc("Reads a UTF-8 file.", cty.String, func(p string) (cty.Value, error) {
			t, err := s.readText(p)
			return cty.StringVal(t), err
		}),
		"filebase64": s.pathFunc("Reads a file as base64.", cty.String, func(p string) (cty.Value, error) {
			b, err := s.read(p)
			return cty.StringVal(b64(b)), err
		}),
		"fileexists":       s.pathFunc("Reports whether a regular file exists at path.", cty.Bool, s.exists),
		"filemd5":          s.hashFunc("Returns the hex MD5 of a file.", md5.New, hex.EncodeToString),
		"filesha1":         s.hashFunc("Returns the hex SHA-1 of a file.", sha1.New, hex.EncodeToString),
		"filesha256":       s.hashFunc("Returns the hex SHA-256 of a file.", sha256.New, hex.EncodeToString),
		"filesha512":       s.hashFunc("Returns the hex SHA-512 of a file.", sha512.New, hex.EncodeToString),
		"filebase64sha256": s.hashFunc("Returns the base64 SHA-256 of a file.", sha256.New, b64),
		"filebase64sha512": s.hashFunc("Returns the base64 SHA-512 of a file.", sha512.New, b64),
		"fileset": function.New(&function.Spec{
			Description: "Returns the set of regular files below path that match pattern.",
			Params:      []function.Parameter{{Name: "path", Type: cty.String}, {Name: "pattern", Type: cty.String}},
			Type:        function.StaticReturnType(cty.Set(cty.String)),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				return s.fileset(args[0].AsString(), args[1].AsString())
			},
		}),
	}
	// Templates see every function except templatefile itself, as in OpenTofu (no recursion).
	tmplFuncs := func() map[string]function.Function {
		m := make(map[string]function.Function, len(lib)+len(out))
		for k, v := range lib {
			m[k] = v
		}
		for k, v := range out {
			m[k] = v
		}
		m["templatefile"] = refusedFunc("templatefile", "it cannot be called from inside a template")
		return m
	}
	out["templatefile"] = function.New(&function.Spec{
		Description: "Renders a template file with the given variables.",
		Params:      []function.Parameter{{Name: "path", Type: cty.String}, {Name: "vars", Type: cty.DynamicPseudoType}},
		Type:        function.StaticReturnType(cty.DynamicPseudoType),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			p := args[0].AsString()
			src, err := s.readText(p)
			if err != nil {
				return cty.DynamicVal, function.NewArgError(0, err)
			}
			return renderTemplate(src, p, args[1], tmplFuncs())
		},
	})
	out["templatestring"] = function.New(&function.Spec{
		Description: "Renders a template held in a string with the given variables.",
		Params:      []function.Parameter{{Name: "template", Type: cty.String}, {Name: "vars", Type: cty.DynamicPseudoType}},
		Type:        function.StaticReturnType(cty.DynamicPseudoType),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return renderTemplate(args[0].AsString(), "<templatestring argument>", args[1], tmplFuncs())
		},
	})
	return out
}

func (s fileScope) exists(p string) (cty.Value, error) {
	rel, err := s.rel(p)
	if err != nil {
		return cty.NilVal, err
	}
	r, err := s.open()
	if err != nil {
		return cty.NilVal, err
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return cty.False, nil
	case err != nil:
		return cty.NilVal, fmt.Errorf("stat %s: %w", p, err)
	case !fi.Mode().IsRegular():
		return cty.NilVal, fmt.Errorf("%s is not a regular file, but %q", p, fi.Mode().String())
	}
	return cty.True, nil
}

func (s fileScope) fileset(base, pattern string) (cty.Value, error) {
	rel, err := s.rel(base)
	if err != nil {
		return cty.NilVal, function.NewArgError(0, err)
	}
	if _, err := doublestar.Match(pattern, ""); err != nil {
		return cty.NilVal, function.NewArgErrorf(1, "failed to glob pattern %q: %v", pattern, err)
	}
	r, err := s.open()
	if err != nil {
		return cty.NilVal, err
	}
	defer r.Close()
	start := filepath.ToSlash(rel)
	var matches []cty.Value
	err = fs.WalkDir(r.FS(), start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll // OpenTofu: a missing directory has no matches
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		name := strings.TrimPrefix(p, start+"/")
		if start == "." {
			name = p
		}
		if ok, _ := doublestar.Match(pattern, name); ok {
			matches = append(matches, cty.StringVal(path.Clean(name)))
		}
		return nil
	})
	if err != nil {
		return cty.NilVal, function.NewArgErrorf(0, "fileset %s: %v", base, err)
	}
	if len(matches) == 0 {
		return cty.SetValEmpty(cty.String), nil
	}
	return cty.SetVal(matches), nil
}

// renderTemplate evaluates src as an HCL template whose only variables are vars.
func renderTemplate(src, name string, vars cty.Value, funcs map[string]function.Function) (cty.Value, error) {
	expr, diags := hclsyntax.ParseTemplate([]byte(src), name, hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		return cty.DynamicVal, diags
	}
	t := vars.Type()
	if !(t.IsMapType() || t.IsObjectType()) || vars.IsNull() {
		return cty.DynamicVal, function.NewArgErrorf(1, "invalid vars value: must be a map or object")
	}
	if !vars.IsWhollyKnown() {
		return cty.DynamicVal, nil
	}
	ctx := &hcl.EvalContext{Variables: vars.AsValueMap(), Functions: funcs}
	for _, tr := range expr.Variables() {
		if _, ok := ctx.Variables[tr.RootName()]; !ok {
			return cty.DynamicVal, function.NewArgErrorf(1, "vars map does not contain key %q, referenced at %s", tr.RootName(), tr.SourceRange())
		}
	}
	v, diags := expr.Value(ctx)
	if diags.HasErrors() {
		return cty.DynamicVal, diags
	}
	return v, nil
}
