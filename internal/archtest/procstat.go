package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"sort"
	"strconv"
	"strings"
)

// ProcStatOwner is the one package that may read /proc/PID/stat: its parser, whose invariants
// (a command name holding spaces and parentheses, zombies reported as gone) hand-written
// parsers elsewhere got wrong.
const ProcStatOwner = "internal/procfs"

// ProcStatReaders parses every .go file under root, test files included, outside
// ProcStatOwner (and this file) and returns, sorted, "file:line: literal" for each string
// literal naming a process's stat file: one ending in "/stat" (other than the system-wide
// "/proc/stat"), or the bare "stat" in a file that also names a "/proc" path
// (filepath.Join("/proc", pid, "stat")).
func ProcStatReaders(root string) ([]string, error) {
	var out []string
	err := walkGoFiles(root, true, func(rel string, fset *token.FileSet, f *ast.File) {
		if strings.HasPrefix(rel, ProcStatOwner+"/") || rel == "internal/archtest/procstat.go" { // this file names the paths it looks for
			return
		}
		var bare []string
		proc := false
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			at := fmt.Sprintf("%s:%d: %s", rel, fset.Position(lit.Pos()).Line, lit.Value)
			switch {
			case v == "stat":
				bare = append(bare, at)
			case strings.HasSuffix(v, "/stat") && v != "/proc/stat":
				out = append(out, at)
			}
			proc = proc || strings.HasPrefix(v, "/proc")
			return true
		})
		if proc {
			out = append(out, bare...)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("/proc stat readers: %w", err)
	}
	sort.Strings(out)
	return out, nil
}
