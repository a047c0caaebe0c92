package config

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// The piecewise parse must give exactly what one hclsyntax.ParseConfig of the whole source
// gives (body, ranges, diagnostics), whatever the source; these inputs put a "}" line followed
// by a block-like line inside each multi-line construct HCL has.
var parsePiecesCases = map[string]string{
	"blocks":               "a {\n  x = 1\n}\nb \"l\" {\n  y = [\n    2,\n  ]\n}\nc {\n}\n",
	"top attributes":       "x = 1\nb {\n}\ny = 2\nc {\n}\nz = 3\n",
	"duplicate attr":       "x = 1\nb {\n}\nx = 2\n",
	"heredoc":              "a {\n  t = <<EOF\n}\nb {\n}\nEOF\n}\nc {\n}\n",
	"block comment":        "a {\n}\n/*\n}\nb {\n}\n*/\nc {\n}\n",
	"template":             "a {\n  t = \"${\n}\nb {\n}\n\"\n}\n",
	"brackets":             "a = [\n{\n}\nb {\n}\n]\n",
	"syntax error":         "a {\n}\nb {\n  x = \n}\nc {\n}\n",
	"unclosed":             "a {\n}\nb {\n",
	"crlf":                 "a {\r\n  x = 1\r\n}\r\nb {\r\n}\r\n",
	"bom":                  "\xef\xbb\xbfa {\n}\nb {\n}\n",
	"no newline":           "a {\n}\nb {\n}",
	"comment between":      "a {\n}\n# note\nb {\n}\n// more\nc {\n}\n",
	"top heredoc":          "a = <<EOT\n}\nb {\nEOT\nc {\n}\n",
	"top indented heredoc": "a = <<-EOT\n  x\n}\nb {\n  EOT\n",
	"top template":         "a = \"${x}\n}\nb {\n\"\nc {\n}\n",
	"top call":             "a = f(\n{\n}\nb {\n}\n)\n",
	"unicode":              "a {\n  s = \"héllo 👍\"\n}\nb {\n  t = \"ü\"\n}\n",
}

func checkParsePieces(t *testing.T, src []byte, target int) {
	t.Helper()
	want, wantDiags := hclsyntax.ParseConfig(src, "f.hcl", hcl.InitialPos)
	got, gotDiags := parsePieces(src, "f.hcl", target)
	if len(wantDiags) != len(gotDiags) || len(wantDiags) > 0 && !reflect.DeepEqual(wantDiags, gotDiags) {
		t.Fatalf("target %d: got diagnostics %v, want %v", target, gotDiags, wantDiags)
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("target %d: piecewise parse differs from one parse of %q", target, src)
	}
}

func TestParsePieces(t *testing.T) {
	for name, src := range parsePiecesCases {
		t.Run(name, func(t *testing.T) {
			for _, target := range []int{0, 1, 8, 1 << 20} {
				checkParsePieces(t, []byte(src), target)
			}
		})
	}
}

// TestParsePiecesSplits checks that formatted input really is split (the point of it), and
// that a "}" line inside a heredoc is not taken for a split that survives.
func TestParsePiecesSplits(t *testing.T) {
	if got := len(chunkCuts([]byte(parsePiecesCases["blocks"]), 1)); got != 2 {
		t.Fatalf("blocks: got %d cuts, want 2", got)
	}
	if got := len(chunkCuts([]byte(parsePiecesCases["comment between"]), 1)); got != 0 {
		t.Fatalf("comment between: got %d cuts, want 0", got)
	}
}

// AddFuzzSeeds adds every example topology and every diagnostics golden input to f's corpus
// (shared with the external test package's FuzzLoadEvaluate).
func AddFuzzSeeds(f *testing.F) {
	seeds, _ := filepath.Glob("../../examples/*/*.sysbox.hcl")
	more, _ := filepath.Glob("testdata/diags/*/*.hcl")
	for _, p := range append(seeds, more...) {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	if len(seeds)+len(more) < 5 {
		f.Fatalf("only %d seed files found", len(seeds)+len(more))
	}
}

// FuzzParsePieces compares the piecewise parse with one parse of the whole input, at several
// piece sizes. Seeds: the cases above, every example topology and every diagnostics golden input.
func FuzzParsePieces(f *testing.F) {
	for _, src := range parsePiecesCases {
		f.Add([]byte(src))
	}
	AddFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		for _, target := range []int{1, 64, 2048} {
			checkParsePieces(t, src, target)
		}
	})
}
