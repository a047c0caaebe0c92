package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// fastParseCases are inputs parseFast must parse itself (to the body hclsyntax gives).
var fastParseCases = map[string]string{
	"depchain": `resource "sysbox_network" "net0" {
  ipv4_cidr = "198.18.0.0/30"
}
resource "sysbox_node" "n1" {
  driver  = "netns"
  command = ["sleep", "infinity"]
  depends_on = [sysbox_node.n0]
  attachment "lan" {
    network = sysbox_network.net0
  }
}
`,
	"literals":          "a = 1\nb = true\nc = false\nd = null\ne = 12345678901234567890\nf = \"x y/z:1\"\n",
	"traversals":        "a = x\nb = x.y.z\nc = [x.y, z]\nd = a . b\n",
	"tuples":            "a = []\nb = [1]\nc = [1, 2,]\nd = [\n  \"x\",\n  \"y\",\n]\ne = [[1], [], [x.y]]\nf = [\n\n1\n\n,\n2]\n",
	"blocks":            "a {\n}\nb \"l\" m {\n  x = 1\n\n  c {}\n  d \"e\" {\n    y = [2]\n  }\n}\n",
	"blank lines":       "\n\n   \na = 1\n   \n\nb {\n  \n}\n\n",
	"no final newline":  "a {\n  x = 1\n}",
	"attr at eof":       "a = [1]",
	"spaces":            "a    =    [ 1 ,  2 ]   \nb   \"l\"   {   \n  c = x   \n}   \n",
	"empty":             "",
	"only spaces":       "   ",
	"dashes in names":   "a-b = c-d.e-f\nblk-1 l-2 {\n}\n",
	"comments":          "# head\n// more\n/* block\n  comment */\na = 1 # c\nb = [ # c\n  1, // c\n  /* c */ 2,\n]\nc /* c */ {\n  # c\n}\n# tail",
	"first comment":     "# only\n",
	"comment at eof":    "a = 1\n# no newline",
	"templates":         "a = \"${x}\"\nb = \"${cidrhost(\"198.18.0.0/16\", 5)}/16\"\nc = \"p-${x.y}-${f(1, [2])}-s\"\nd = [\"${ x }\", \"${\n  y\n}\"]\ne = \"${x}${y}\"\n",
	"calls":             "a = f()\nb = f(1, \"x\", y.z, [1],)\nc = f(\n  1,\n  g(2)\n)\nd = [f(1)]\ne = f (1)\n",
	"keywords as names": "for = 1\nif = [x, for]\nin = x.for\n",
}

// fastParseFallbacks are inputs parseFast must leave to hclsyntax.
var fastParseFallbacks = map[string]string{
	"unclosed comment": "a = 1 /* c\n",
	"slash":            "a = 1 / 2\n",
	"strip":            "a = \"${~x}\"\n",
	"strip end":        "a = \"${x~}\"\n",
	"escaped interp":   "a = \"$${x}\"\n",
	"unclosed interp":  "a = \"${x\"\n",
	"template label":   "a \"${x}\" {\n}\n",
	"call ellipsis":    "a = f(x...)\n",
	"call attr":        "a = f(1).x\n",
	"call newline":     "a = f\n(1)\n",
	"parentheses":      "a = (1)\n",
	"escape":           "a = \"\\n\"\n",
	"empty string":     "a = \"\"\n",
	"percent":          "a = \"%{if x}y%{endif}\"\n",
	"dollar":           "a = \"$x\"\n",
	"heredoc":          "a = <<EOF\nx\nEOF\n",
	"namespaced call":  "a = p::f(1)\n",
	"operator":         "a = 1 + 2\n",
	"conditional":      "a = x ? 1 : 2\n",
	"index":            "a = x[0]\n",
	"legacy index":     "a = x.0\n",
	"splat":            "a = x.*.y\n",
	"tuple index":      "a = [1][0]\n",
	"tuple attr":       "a = [1].x\n",
	"string attr":      "a = \"s\".x\n",
	"index after nl":   "a = [[1]\n[0]]\n",
	"decimal":          "a = 1.5\n",
	"exponent":         "a = 1e3\n",
	"number then name": "a = 12ab\n",
	"object":           "a = {x = 1}\n",
	"for":              "a = [for x in y: x]\n",
	"single line blk":  "a { x = 1 }\n",
	"tab":              "a\t= 1\n",
	"crlf":             "a = 1\r\n",
	"non-ascii":        "a = \"ü\"\n",
	"duplicate":        "a = 1\na = 2\n",
	"unclosed block":   "a {\n  x = 1\n",
	"unclosed tuple":   "a = [1,\n",
	"unclosed string":  "a = \"x\n",
	"stray brace":      "}\n",
	"no newline after": "a = 1 b = 2\n",
	"block then attr":  "a {\n} b = 1\n",
	"label newline":    "a \"l\"\n{\n}\n",
	"equals compare":   "a == 1\n",
	"fat arrow":        "a => 1\n",
	"ellipsis":         "a = [x...]\n",
	"quoted name":      "\"a\" = 1\n",
	"attr newline":     "a =\n1\n",
}

func TestParseFast(t *testing.T) {
	for name, src := range fastParseCases {
		t.Run(name, func(t *testing.T) {
			want, diags := hclsyntax.ParseConfig([]byte(src), "f.hcl", hcl.InitialPos)
			if len(diags) > 0 {
				t.Fatalf("hclsyntax: %v", diags)
			}
			got, ok := parseFast([]byte(src), "f.hcl", hcl.InitialPos)
			if !ok {
				t.Fatal("parseFast left it to hclsyntax")
			}
			if !reflect.DeepEqual(want.Body, got) {
				t.Fatalf("parseFast's body differs from hclsyntax's for %q", src)
			}
			// The same text as a later piece of a file: positions offset.
			at := hcl.Pos{Line: 7, Column: 1, Byte: 300}
			want, _ = hclsyntax.ParseConfig([]byte(src), "f.hcl", at)
			if got, ok = parseFast([]byte(src), "f.hcl", at); !ok || !reflect.DeepEqual(want.Body, got) {
				t.Fatalf("at %v: parseFast's body differs from hclsyntax's (ok %v)", at, ok)
			}
		})
	}
	for name, src := range fastParseFallbacks {
		t.Run(name, func(t *testing.T) {
			if _, ok := parseFast([]byte(src), "f.hcl", hcl.InitialPos); ok {
				t.Fatalf("parseFast parsed %q, which it does not cover", src)
			}
			checkParsePieces(t, []byte(src), 1)
		})
	}
}

// TestParsePiecesFast checks that a file made of covered pieces comes out as one hclsyntax
// parse of the whole, and one with an uncovered piece in the middle too.
func TestParsePiecesFast(t *testing.T) {
	one := fastParseCases["depchain"]
	src := strings.Repeat(one, 30)
	checkParsePieces(t, []byte(src), 256)
	mixed := strings.Repeat(one, 10) + "# a comment\nresource \"x\" \"y\" {\n  a = f(1)\n}\n" + strings.Repeat(one, 10)
	checkParsePieces(t, []byte(mixed), 256)
}

// FuzzParseFast: whatever parseFast accepts, hclsyntax parses without diagnostics to the same body.
func FuzzParseFast(f *testing.F) {
	for _, src := range fastParseCases {
		f.Add([]byte(src))
	}
	for _, src := range fastParseFallbacks {
		f.Add([]byte(src))
	}
	for _, src := range parsePiecesCases {
		f.Add([]byte(src))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		got, ok := parseFast(src, "f.hcl", hcl.InitialPos)
		if !ok {
			return
		}
		want, diags := hclsyntax.ParseConfig(src, "f.hcl", hcl.InitialPos)
		if len(diags) > 0 {
			t.Fatalf("parseFast accepted %q, which hclsyntax rejects: %v", src, diags)
		}
		if !reflect.DeepEqual(want.Body, got) {
			t.Fatalf("parseFast's body differs from hclsyntax's for %q", src)
		}
	})
}

// TestValidIdentifier compares validIdentifier with hclsyntax.ValidIdentifier on every string
// of up to three bytes over an alphabet of the ASCII classes that matter, and on a few others.
func TestValidIdentifier(t *testing.T) {
	alphabet := []byte("aZ_-09 .$\"\x7f\x00")
	var all []string
	var gen func(prefix string, n int)
	gen = func(prefix string, n int) {
		all = append(all, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(prefix+string(c), n-1)
		}
	}
	gen("", 3)
	all = append(all, "sysbox_node", "n10000", "web-1", "héllo", "ü", "a\xffb", "_", "-a", "1a")
	for _, s := range all {
		if got, want := validIdentifier(s), hclsyntax.ValidIdentifier(s); got != want {
			t.Errorf("validIdentifier(%q) = %v, hclsyntax says %v", s, got, want)
		}
	}
}
