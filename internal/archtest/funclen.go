package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
)

// MaxFuncLines is the longest a production function may be, counted from `func` to its closing
// brace, unless LongFuncAllowed names it with a reason.
const MaxFuncLines = 80

// LongFuncAllowed lists the production functions allowed over MaxFuncLines, keyed as
// LongFuncs reports them, each with the reason it stays long.
var LongFuncAllowed = map[string]string{}

// LongFunc is one function declaration longer than a limit.
type LongFunc struct {
	Key   string // "dir/file.go: Recv.Name" (module-relative, slash-separated)
	Lines int
}

// LongFuncs parses every non-test .go file under root (skipping testdata, vendor and dot
// directories) and returns, sorted by key, each function declaration longer than max lines.
func LongFuncs(root string, max int) ([]LongFunc, error) {
	var out []LongFunc
	err := walkGoFiles(root, false, func(rel string, fset *token.FileSet, f *ast.File) {
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			n := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
			if n > max {
				out = append(out, LongFunc{Key: rel + ": " + funcName(fn), Lines: n})
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("function length: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// walkGoFiles parses every .go file under root (test files too if tests), skipping testdata,
// vendor, dot and underscore directories, and calls fn with its module-relative,
// slash-separated path. A file that does not parse is an error naming it.
func walkGoFiles(root string, tests bool, fn func(rel string, fset *token.FileSet, f *ast.File)) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || (!tests && strings.HasSuffix(name, "_test.go")) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		fn(filepath.ToSlash(rel), fset, f)
		return nil
	})
}

// funcName is Name for a function and Recv.Name for a method (pointer and type parameters
// dropped), so a key survives a change of receiver kind.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
