package archtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFunctionLength fails on every production function of the module longer than
// MaxFuncLines that LongFuncAllowed does not name, and on allow-list entries that carry no
// reason or no longer match a long function (so a split function leaves the list).
func TestFunctionLength(t *testing.T) {
	long, err := LongFuncs("../..", MaxFuncLines)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, f := range long {
		seen[f.Key] = true
		if _, ok := LongFuncAllowed[f.Key]; !ok {
			t.Errorf("%s is %d lines, over %d: split it by concern, or add it to LongFuncAllowed with the reason it stays long", f.Key, f.Lines, MaxFuncLines)
		}
	}
	for key, reason := range LongFuncAllowed {
		if strings.TrimSpace(reason) == "" {
			t.Errorf("LongFuncAllowed[%q] has no reason", key)
		}
		if !seen[key] {
			t.Errorf("LongFuncAllowed[%q]: no such function over %d lines any more; remove the entry", key, MaxFuncLines)
		}
	}
}

// TestLongFuncsCounts checks the counter on a generated tree: a function and a method one
// line over the limit are reported (with their keys), ones exactly at the limit, test files
// and testdata are not.
func TestLongFuncsCounts(t *testing.T) {
	const max = 10
	body := func(name string, lines int) string {
		// "func" line + (lines-2) statements + closing brace.
		return name + " {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	root := t.TempDir()
	write := func(rel, src string) { writeTree(t, root, rel, "package p\n\ntype T[K any] struct{}\n\n"+src) }
	write("a/a.go", body("func atLimit()", max)+body("func over()", max+1)+
		body("func (t *T[K]) method()", max+1)+body("func (T[K]) short()", 3))
	write("a/a_test.go", body("func inTest()", max+5))
	write("a/testdata/x.go", body("func inTestdata()", max+5))

	got, err := LongFuncs(root, max)
	if err != nil {
		t.Fatal(err)
	}
	want := []LongFunc{{Key: "a/a.go: T.method", Lines: max + 1}, {Key: "a/a.go: over", Lines: max + 1}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("got %v, want %v", got[i], want[i])
		}
	}
}

// TestLongFuncsParseError checks a file that does not parse is an error naming it, not a
// file silently left out.
func TestLongFuncsParseError(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "bad.go")
	if err := os.WriteFile(p, []byte("package p\nfunc {"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LongFuncs(root, 80); err == nil || !strings.Contains(err.Error(), "bad.go") {
		t.Fatalf("got %v, want an error naming bad.go", err)
	}
}
