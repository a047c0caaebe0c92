package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"zyvor.dev/sysbox/internal/secrets"
)

// funcTable is the function table of a module directory dir inside topology root.
func funcTable(t *testing.T, root, dir string) map[string]function.Function {
	t.Helper()
	e := &evaluator{rootDir: root, funcCache: map[string]map[string]function.Function{},
		secretRefs: map[string]secrets.Ref{}, envRead: map[string]string{}}
	return e.funcsFor(dir)
}

func evalString(t *testing.T, funcs map[string]function.Function, src string) (cty.Value, hcl.Diagnostics) {
	t.Helper()
	expr, diags := hclsyntax.ParseExpression([]byte(src), "test.hcl", hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		t.Fatalf("parse %s: %v", src, diags)
	}
	return expr.Value(&hcl.EvalContext{Functions: funcs})
}

type funcCase struct {
	expr    string
	want    cty.Value // compared with RawEquals
	wantErr string    // substring of the error; want is ignored when set
}

func runFuncCases(t *testing.T, funcs map[string]function.Function, cases []funcCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.expr, func(t *testing.T) {
			got, diags := evalString(t, funcs, c.expr)
			if c.wantErr != "" {
				if !diags.HasErrors() {
					t.Fatalf("got %#v, want an error containing %q", got, c.wantErr)
				}
				if !strings.Contains(diags.Error(), c.wantErr) {
					t.Fatalf("got error %q, want one containing %q", diags.Error(), c.wantErr)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatalf("got error %v, want %#v", diags, c.want)
			}
			if !got.RawEquals(c.want) {
				t.Fatalf("got %#v, want %#v", got, c.want)
			}
		})
	}
}

func strs(ss ...string) cty.Value {
	out := make([]cty.Value, len(ss))
	for i, s := range ss {
		out[i] = cty.StringVal(s)
	}
	return cty.ListVal(out)
}

// TestFunctionsMatchOpenTofu checks the functions where sysbox once differed from OpenTofu,
// and the ones sysbox implements itself, with cases from OpenTofu's function tests and
// reference documentation.
func TestFunctionsMatchOpenTofu(t *testing.T) {
	dir := t.TempDir()
	runFuncCases(t, funcTable(t, dir, dir), []funcCase{
		// index is the position of a value (go-cty's stdlib index is an element lookup)
		{expr: `index(["a", "b", "c"], "b")`, want: cty.NumberIntVal(1)},
		{expr: `index(["a", "b", "c"], "a")`, want: cty.NumberIntVal(0)},
		{expr: `index(["a", "b", "c"], "z")`, wantErr: "item not found"},
		{expr: `index([], "a")`, wantErr: "cannot search an empty list"},
		{expr: `index("abc", "a")`, wantErr: "argument must be a list or tuple"},
		// coalesce skips null and ""
		{expr: `coalesce("", "b")`, want: cty.StringVal("b")},
		{expr: `coalesce(null, "", "c")`, want: cty.StringVal("c")},
		{expr: `coalesce(1, 2)`, want: cty.NumberIntVal(1)},
		{expr: `coalesce("", "")`, wantErr: "no non-null, non-empty-string arguments"},
		// replace with /regex/
		{expr: `replace("1 + 2 + 3", "+", "-")`, want: cty.StringVal("1 - 2 - 3")},
		{expr: `replace("hello world", "/w.*d/", "everybody")`, want: cty.StringVal("hello everybody")},
		{expr: `replace("hello", "/l/", "L")`, want: cty.StringVal("heLLo")},
		{expr: `replace("helo", "/(l)/", "$1$1")`, want: cty.StringVal("hello")},
		{expr: `replace("a/b", "/", "-")`, want: cty.StringVal("a-b")},
		// lookup without a default
		{expr: `lookup({a = "ay", b = "bee"}, "a")`, want: cty.StringVal("ay")},
		{expr: `lookup(tomap({a = "ay", b = "bee"}), "b")`, want: cty.StringVal("bee")},
		{expr: `lookup({a = "ay"}, "c", "what?")`, want: cty.StringVal("what?")},
		{expr: `lookup(tomap({a = "ay"}), "c")`, wantErr: `lookup failed to find key "c"`},
		{expr: `lookup({a = "ay"}, "c")`, wantErr: `the given object has no attribute "c"`},
		{expr: `lookup({foo = "bar", baz = 1}, "baz")`, want: cty.NumberIntVal(1)},
		{expr: `lookup({a = "ay"}, "a", "x", "y")`, wantErr: "lookup() takes two or three arguments, got 4"},
		// length of strings (grapheme clusters), objects and tuples
		{expr: `length("hello")`, want: cty.NumberIntVal(5)},
		{expr: `length("")`, want: cty.NumberIntVal(0)},
		{expr: `length("noe\u0308l")`, want: cty.NumberIntVal(4)},
		{expr: `length("Живой Журнал")`, want: cty.NumberIntVal(12)},
		{expr: `length({a = 1, b = "x"})`, want: cty.NumberIntVal(2)},
		{expr: `length(["a", 1])`, want: cty.NumberIntVal(2)},
		{expr: `length(tolist([]))`, want: cty.NumberIntVal(0)},
		{expr: `length(toset(["a", "a", "b"]))`, want: cty.NumberIntVal(2)},
		{expr: `length(5)`, wantErr: "argument must be a string, a collection type, or a structural type"},
		// cidr functions: leading-zero octets read as decimal, IPv4-mapped prefixes normalised
		{expr: `cidrhost("192.168.1.0/24", 5)`, want: cty.StringVal("192.168.1.5")},
		{expr: `cidrhost("192.168.1.0/24", -5)`, want: cty.StringVal("192.168.1.251")},
		{expr: `cidrhost("192.168.1.0/24", -256)`, want: cty.StringVal("192.168.1.0")},
		{expr: `cidrhost("010.001.0.0/24", 6)`, want: cty.StringVal("10.1.0.6")},
		{expr: `cidrhost("192.168.1.0/30", 255)`, wantErr: "prefix of 30 does not accommodate a host numbered 255"},
		{expr: `cidrhost("192.168.1.0/30", -255)`, wantErr: "does not accommodate a host numbered -255"},
		{expr: `cidrhost("not-a-cidr", 6)`, wantErr: "invalid CIDR expression"},
		{expr: `cidrhost("10.256.0.0/8", 6)`, wantErr: "invalid CIDR expression"},
		{expr: `cidrhost("10.0.0.0/8", 0.75)`, wantErr: "must be a whole number"},
		{expr: `cidrnetmask("192.168.1.0/24")`, want: cty.StringVal("255.255.255.0")},
		{expr: `cidrnetmask("192.168.1.0/32")`, want: cty.StringVal("255.255.255.255")},
		{expr: `cidrnetmask("0.0.0.0/0")`, want: cty.StringVal("0.0.0.0")},
		{expr: `cidrnetmask("010.001.0.0/24")`, want: cty.StringVal("255.255.255.0")},
		{expr: `cidrnetmask("110.256.0.0/8")`, wantErr: "invalid CIDR expression"},
		{expr: `cidrnetmask("1::/64")`, wantErr: "IPv6 addresses cannot have a netmask"},
		{expr: `cidrsubnet("192.168.2.0/20", 4, 6)`, want: cty.StringVal("192.168.6.0/24")},
		{expr: `cidrsubnet("fe80::/48", 16, 6)`, want: cty.StringVal("fe80:0:0:6::/64")},
		{expr: `cidrsubnet("::ffff:192.168.0.0/112", 8, 6)`, want: cty.StringVal("192.168.6.0/24")},
		{expr: `cidrsubnet("fe80::/48", 33, 6)`, want: cty.StringVal("fe80::3:0:0:0/81")},
		{expr: `cidrsubnet("010.001.0.0/24", 4, 1)`, want: cty.StringVal("10.1.0.16/28")},
		{expr: `cidrsubnet("192.168.0.0/30", 4, 6)`, wantErr: "insufficient address space"},
		{expr: `cidrsubnet("192.168.0.0/168", 2, 16)`, wantErr: "invalid CIDR expression"},
		{expr: `cidrsubnet("10.0.0.0/8", 0.5, 1)`, wantErr: "must be a whole number"},
		{expr: `cidrsubnets("10.0.0.0/21", 3, 3, 3, 4, 4, 4, 7, 7, 7)`, want: strs(
			"10.0.0.0/24", "10.0.1.0/24", "10.0.2.0/24", "10.0.3.0/25", "10.0.3.128/25",
			"10.0.4.0/25", "10.0.4.128/28", "10.0.4.144/28", "10.0.4.160/28")},
		{expr: `cidrsubnets("010.0.0.0/21", 3)`, want: strs("10.0.0.0/24")},
		{expr: `cidrsubnets("10.0.0.0/30", 1, 3)`, wantErr: "would extend prefix to 33 bits, which is too long for an IPv4 address"},
		{expr: `cidrsubnets("10.0.0.0/8", 1, 1, 1)`, wantErr: "not enough remaining address space for a subnet with a prefix of 9 bits after 10.128.0.0/9"},
		{expr: `cidrsubnets("10.0.0.0/8", 1, 0)`, wantErr: "must extend prefix by at least one bit"},
		{expr: `cidrsubnets("fe80::/48", 1, 33)`, wantErr: "may not extend prefix by more than 32 bits"},
		{expr: `cidrcontains("192.168.2.0/20", "192.168.2.1")`, want: cty.True},
		{expr: `cidrcontains("192.168.2.0/20", "192.168.2.0/22")`, want: cty.True},
		{expr: `cidrcontains("192.168.2.0/20", "192.126.2.1")`, want: cty.False},
		{expr: `cidrcontains("192.168.2.0/20", "192.126.2.0/18")`, want: cty.False},
		{expr: `cidrcontains("fe80::/48", "fe80::1")`, want: cty.True},
		{expr: `cidrcontains("fe80::/48", "fe81::1")`, want: cty.False},
		{expr: `cidrcontains("192.168.2.0/20", "fe80::1")`, wantErr: "address family mismatch: 192.168.2.0/20 vs. fe80::1"},
		{expr: `cidrcontains("fe80::/48", "192.168.2.0/20")`, wantErr: "address family mismatch: fe80::/48 vs. 192.168.2.0/20"},
		{expr: `cidrcontains("not-a-cidr", "192.168.2.1")`, wantErr: "invalid CIDR address: not-a-cidr"},
		{expr: `cidrcontains("192.168.2.0/20", "not-an-address")`, wantErr: "invalid IP address or prefix: not-an-address"},
		// collection functions sysbox implements itself
		{expr: `sum([1, 2, 3])`, want: cty.NumberIntVal(6)},
		{expr: `sum([-1.5, 1])`, want: cty.NumberFloatVal(-0.5)},
		{expr: `sum([])`, wantErr: "cannot sum an empty list"},
		{expr: `one([])`, want: cty.NullVal(cty.DynamicPseudoType)},
		{expr: `one(tolist([]))`, want: cty.NullVal(cty.DynamicPseudoType)},
		{expr: `one(["a"])`, want: cty.StringVal("a")},
		{expr: `one(["a", "b"])`, wantErr: "either zero or one elements"},
		{expr: `alltrue([])`, want: cty.True},
		{expr: `alltrue([true, false])`, want: cty.False},
		{expr: `alltrue([true, true])`, want: cty.True},
		{expr: `anytrue([])`, want: cty.False},
		{expr: `anytrue([false, true])`, want: cty.True},
		{expr: `matchkeys(["i-123", "i-abc", "i-def"], ["us-west", "us-east", "us-east"], ["us-east"])`, want: strs("i-abc", "i-def")},
		{expr: `matchkeys(["a"], ["x", "y"], ["x"])`, wantErr: "length of keys and values should be equal"},
		{expr: `transpose({a = ["1", "2"], b = ["2", "3"]})`, want: cty.MapVal(map[string]cty.Value{
			"1": strs("a"), "2": strs("a", "b"), "3": strs("b")})},
		// strings, time, encodings, hashes
		{expr: `startswith("hello world", "hello")`, want: cty.True},
		{expr: `startswith("hello world", "world")`, want: cty.False},
		{expr: `endswith("hello world", "world")`, want: cty.True},
		{expr: `strcontains("hello world", "wor")`, want: cty.True},
		{expr: `strcontains("hello world", "wod")`, want: cty.False},
		{expr: `timecmp("2017-11-22T00:00:00Z", "2017-11-22T00:00:00Z")`, want: cty.NumberIntVal(0)},
		{expr: `timecmp("2017-11-22T00:00:00Z", "2017-11-22T01:00:00Z")`, want: cty.NumberIntVal(-1)},
		{expr: `timecmp("2017-11-22T01:00:00+01:00", "2017-11-22T00:00:00Z")`, want: cty.NumberIntVal(0)},
		{expr: `timecmp("2017-11-22", "2017-11-22T00:00:00Z")`, wantErr: "not a valid RFC3339 timestamp"},
		{expr: `urlencode("Hello World!")`, want: cty.StringVal("Hello+World%21")},
		{expr: `urldecode("mailto%3Aemail%3Fsubject%3Dthis%2Bis%2Bmy%2Bsubject")`, want: cty.StringVal("mailto:email?subject=this+is+my+subject")},
		{expr: `base64encode("Hello World")`, want: cty.StringVal("SGVsbG8gV29ybGQ=")},
		{expr: `base64decode("SGVsbG8gV29ybGQ=")`, want: cty.StringVal("Hello World")},
		{expr: `base64gunzip(base64gzip("test"))`, want: cty.StringVal("test")},
		{expr: `base64sha256("hello world")`, want: cty.StringVal("uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=")},
		{expr: `base64sha512("hello world")`, want: cty.StringVal("MJ7MSJwS1utMxA9QyQLytNDtd+5RGnx6m808qG1M2G+YndNbxf9JlnDaNCVbRbDP2DDoH2Bdz33FVC6TrpzXbw==")},
		{expr: `textencodebase64("Hello World", "UTF-16LE")`, want: cty.StringVal("SABlAGwAbABvACAAVwBvAHIAbABkAA==")},
		{expr: `textdecodebase64("SABlAGwAbABvACAAVwBvAHIAbABkAA==", "UTF-16LE")`, want: cty.StringVal("Hello World")},
		{expr: `textencodebase64("Hello World", "no-such-encoding")`, wantErr: "is not a supported IANA encoding name or alias"},
		{expr: `md5("hello world")`, want: cty.StringVal("5eb63bbbe01eeed093cb22bb8f5acdc3")},
		{expr: `sha1("hello world")`, want: cty.StringVal("2aae6c35c94fcfb415dbe95f408b9ce91ee846ed")},
		{expr: `sha256("hello world")`, want: cty.StringVal("b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9")},
		{expr: `uuidv5("dns", "www.terraform.io")`, want: cty.StringVal("a5008fae-b28c-5ba5-96cd-82b4c53552d6")},
		{expr: `yamldecode("hello: world")`, want: cty.ObjectVal(map[string]cty.Value{"hello": cty.StringVal("world")})},
		{expr: `yamlencode({a = "b"})`, want: cty.StringVal("\"a\": \"b\"\n")},
		{expr: `basename("foo/bar/baz.txt")`, want: cty.StringVal("baz.txt")},
		{expr: `dirname("foo/bar/baz.txt")`, want: cty.StringVal("foo/bar")},
		{expr: `issensitive(sensitive("x"))`, want: cty.True},
		{expr: `issensitive("x")`, want: cty.False},
		{expr: `issensitive(nonsensitive(sensitive("x")))`, want: cty.False},
		{expr: `issensitive(flip_sensitive("x"))`, want: cty.True},
		{expr: `issensitive(flip_sensitive(sensitive("x")))`, want: cty.False},
		{expr: `templatestring("Hello, $${name}!", {name = "Jane"})`, want: cty.StringVal("Hello, Jane!")},
		{expr: `core::abs(-3)`, want: cty.NumberIntVal(3)},
		{expr: `core::length("ab")`, want: cty.NumberIntVal(2)},
	})
}

// TestRefusedFunctionsNameThemselves: a function sysbox does not offer is an error naming it
// and why, never a silently different result.
func TestRefusedFunctionsNameThemselves(t *testing.T) {
	dir := t.TempDir()
	runFuncCases(t, funcTable(t, dir, dir), []funcCase{
		{expr: `timestamp()`, wantErr: "sysbox does not offer the function timestamp: its result changes between plan and apply"},
		{expr: `plantimestamp()`, wantErr: "sysbox does not offer the function plantimestamp"},
		{expr: `uuid()`, wantErr: "sysbox does not offer the function uuid"},
		{expr: `bcrypt("x")`, wantErr: "sysbox does not offer the function bcrypt"},
		{expr: `abspath("x")`, wantErr: "sysbox does not offer the function abspath"},
		{expr: `pathexpand("~/x")`, wantErr: "sysbox does not offer the function pathexpand"},
		{expr: `list("a")`, wantErr: "sysbox does not offer the function list"},
		{expr: `map("a", "b")`, wantErr: "sysbox does not offer the function map"},
		{expr: `core::timestamp()`, wantErr: "sysbox does not offer the function timestamp"},
	})
}

// TestFileFunctionsStayInTopology reads files relative to a module directory and refuses every
// way out of the topology directory: "..", an absolute path, and a symlink.
func TestFileFunctionsStayInTopology(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mod := filepath.Join(root, "modules", "m")
	for p, body := range map[string]string{
		filepath.Join(mod, "hello.txt"):         "hello world",
		filepath.Join(mod, "greet.tmpl"):        "%{ for n in names }Hello, ${n}!\n%{ endfor }",
		filepath.Join(mod, "loop.tmpl"):         `${templatefile("loop.tmpl", {})}`,
		filepath.Join(mod, "sub", "a.txt"):      "a",
		filepath.Join(mod, "sub", "b.md"):       "b",
		filepath.Join(mod, "sub", "c", "d.txt"): "d",
		filepath.Join(root, "top.txt"):          "top",
		filepath.Join(outside, "secret.txt"):    "secret",
		filepath.Join(mod, "bin.dat"):           "\xff\xfe",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(mod, "escape.txt")); err != nil {
		t.Fatal(err)
	}
	modAbs := strings.ReplaceAll(mod, `\`, `\\`)
	runFuncCases(t, funcTable(t, root, mod), []funcCase{
		{expr: `file("hello.txt")`, want: cty.StringVal("hello world")},
		{expr: `file("` + modAbs + `/hello.txt")`, want: cty.StringVal("hello world")},
		{expr: `file("../../top.txt")`, want: cty.StringVal("top")},
		{expr: `file("../../../` + filepath.Base(outside) + `/secret.txt")`, wantErr: "is outside the topology directory"},
		{expr: `file("` + filepath.Join(outside, "secret.txt") + `")`, wantErr: "is outside the topology directory"},
		{expr: `file("escape.txt")`, wantErr: "escape"},
		{expr: `file("missing.txt")`, wantErr: "no such file or directory"},
		{expr: `file("bin.dat")`, wantErr: "not valid UTF-8"},
		{expr: `filebase64("bin.dat")`, want: cty.StringVal("//4=")},
		{expr: `fileexists("hello.txt")`, want: cty.True},
		{expr: `fileexists("missing.txt")`, want: cty.False},
		{expr: `fileexists("sub")`, wantErr: "is not a regular file"},
		{expr: `fileexists("` + filepath.Join(outside, "secret.txt") + `")`, wantErr: "is outside the topology directory"},
		{expr: `filemd5("hello.txt")`, want: cty.StringVal("5eb63bbbe01eeed093cb22bb8f5acdc3")},
		{expr: `filesha1("hello.txt")`, want: cty.StringVal("2aae6c35c94fcfb415dbe95f408b9ce91ee846ed")},
		{expr: `filesha256("hello.txt")`, want: cty.StringVal("b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9")},
		{expr: `filebase64sha256("hello.txt")`, want: cty.StringVal("uU0nuZNNPgilLlLX2n2r+sSE7+N6U4DukIj3rOLvzek=")},
		{expr: `filesha512("hello.txt") == sha512("hello world")`, want: cty.True},
		{expr: `filebase64sha512("hello.txt")`, want: cty.StringVal("MJ7MSJwS1utMxA9QyQLytNDtd+5RGnx6m808qG1M2G+YndNbxf9JlnDaNCVbRbDP2DDoH2Bdz33FVC6TrpzXbw==")},
		{expr: `fileset("sub", "*.txt")`, want: cty.SetVal([]cty.Value{cty.StringVal("a.txt")})},
		{expr: `fileset("sub", "**/*.txt")`, want: cty.SetVal([]cty.Value{cty.StringVal("a.txt"), cty.StringVal("c/d.txt")})},
		{expr: `fileset("sub", "*.none")`, want: cty.SetValEmpty(cty.String)},
		{expr: `fileset("` + outside + `", "*")`, wantErr: "is outside the topology directory"},
		{expr: `templatefile("greet.tmpl", {names = ["a", "b"]})`, want: cty.StringVal("Hello, a!\nHello, b!\n")},
		{expr: `templatefile("greet.tmpl", {})`, wantErr: `vars map does not contain key "names"`},
		{expr: `templatefile("loop.tmpl", {})`, wantErr: "sysbox does not offer the function templatefile: it cannot be called from inside a template"},
	})
}

// TestEveryFunctionIsDocumented: docs/sysbox-language.md names every function sysbox offers or
// refuses, so the list cannot fall behind the table.
func TestEveryFunctionIsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/sysbox-language.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "### Functions")
	end := strings.Index(doc, "### Variables")
	if start < 0 || end < start {
		t.Fatal("docs/sysbox-language.md: no Functions section")
	}
	words := map[string]bool{}
	for _, f := range strings.FieldsFunc(doc[start:end], func(r rune) bool {
		return !(r == '_' || r == ':' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}) {
		words[f] = true
	}
	dir := t.TempDir()
	for name := range funcTable(t, dir, dir) {
		if strings.HasPrefix(name, coreNamespace) {
			continue
		}
		if !words[name] {
			t.Errorf("function %s is not named in the Functions section of docs/sysbox-language.md", name)
		}
	}
}
