package addrs

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

func TestInstanceStringAndParse(t *testing.T) {
	tests := []struct {
		in   string
		want Instance
	}{
		{`sysbox_node.web`, Instance{Resource: Resource{Managed, "sysbox_node", "web"}}},
		{`sysbox_node.web[0]`, Instance{Resource: Resource{Managed, "sysbox_node", "web"}, Key: IntKey(0)}},
		{`sysbox_node.web[12]`, Instance{Resource: Resource{Managed, "sysbox_node", "web"}, Key: IntKey(12)}},
		{`sysbox_node.web["blue"]`, Instance{Resource: Resource{Managed, "sysbox_node", "web"}, Key: StringKey("blue")}},
		{`sysbox_node.web["a\"b\\c"]`, Instance{Resource: Resource{Managed, "sysbox_node", "web"}, Key: StringKey(`a"b\c`)}},
		{`sysbox_node.web["<&>"]`, Instance{Resource: Resource{Managed, "sysbox_node", "web"}, Key: StringKey(`<&>`)}},
		{`sysbox_node.web["é"]`, Instance{Resource: Resource{Managed, "sysbox_node", "web"}, Key: StringKey("é")}},
		{`sysbox_node.web[""]`, Instance{Resource: Resource{Managed, "sysbox_node", "web"}, Key: StringKey("")}},
		{`data.sysbox_artifact.kernel`, Instance{Resource: Resource{Data, "sysbox_artifact", "kernel"}}},
		{`module.lab.sysbox_network.dmz`, Instance{Module: Module{{Name: "lab"}}, Resource: Resource{Managed, "sysbox_network", "dmz"}}},
		{`module.segment["red"].sysbox_node.target[1]`, Instance{
			Module:   Module{{Name: "segment", Key: StringKey("red")}},
			Resource: Resource{Managed, "sysbox_node", "target"}, Key: IntKey(1)}},
		{`module.a[0].module.b["x"].data.sysbox_artifact.k-1`, Instance{
			Module:   Module{{Name: "a", Key: IntKey(0)}, {Name: "b", Key: StringKey("x")}},
			Resource: Resource{Data, "sysbox_artifact", "k-1"}}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseInstance(tt.in)
			if err != nil {
				t.Fatalf("ParseInstance(%q): %v", tt.in, err)
			}
			if !got.Equal(tt.want) {
				t.Fatalf("ParseInstance(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
			if s := got.String(); s != tt.in {
				t.Errorf("String() = %q, want %q", s, tt.in)
			}
			if got.UniqueKey() != tt.want.UniqueKey() {
				t.Errorf("UniqueKey differs: got %q, want %q", got.UniqueKey(), tt.want.UniqueKey())
			}
		})
	}
}

func TestParseInstanceNonCanonicalEscapeNormalises(t *testing.T) {
	got, err := ParseInstance(`sysbox_node.web["\u0041"]`)
	if err != nil {
		t.Fatal(err)
	}
	if s := got.String(); s != `sysbox_node.web["A"]` {
		t.Errorf("got %q, want %q", s, `sysbox_node.web["A"]`)
	}
}

func TestParseInstanceErrors(t *testing.T) {
	tests := []struct {
		in         string
		wantOffset int
		wantExpect string
	}{
		{``, 0, "an address"},
		{`sysbox_node`, 11, "'.' after the resource type"},
		{`sysbox_node.`, 12, "a resource name"},
		{`sysbox_node.web[`, 16, "an integer or a JSON-quoted string key"},
		{`sysbox_node.web[01]`, 16, "without leading zeros"},
		{`sysbox_node.web[-1]`, 16, "an integer or a JSON-quoted string key"},
		{`sysbox_node.web['a']`, 16, "an integer or a JSON-quoted string key"},
		{`sysbox_node.web["a]`, 19, `closing '"'`},
		{`sysbox_node.web["a"`, 19, `']'`},
		{`sysbox_node.web[0]x`, 18, "end of address"},
		{`sysbox_node.web[0][1]`, 18, "end of address"},
		{`sysbox_node.web.x`, 15, "'[' or end of address"},
		{`module.`, 7, "a module name"},
		{`module.lab`, 10, "a resource after the module path"},
		{`module.lab.`, 11, "a resource type"},
		{`module.lab[`, 11, "an integer or a JSON-quoted string key"},
		{`module.lab x`, 10, `'.' or '['`},
		{`data.`, 5, "a resource type"},
		{`data.data.x`, 5, "reserved"},
		{`1node.web`, 0, "a resource type"},
		{`sysbox_node.web[99999999999999999999]`, 16, "fits in an int"},
		{`sysbox_node.web["\x"]`, 16, "a valid JSON string key"},
		{" sysbox_node.web", 0, "a resource type"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			_, err := ParseInstance(tt.in)
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseInstance(%q) error = %v, want *ParseError", tt.in, err)
			}
			if pe.Offset != tt.wantOffset {
				t.Errorf("offset: got %d, want %d (%v)", pe.Offset, tt.wantOffset, err)
			}
			if !strings.Contains(pe.Expected, tt.wantExpect) {
				t.Errorf("expected: got %q, want it to contain %q", pe.Expected, tt.wantExpect)
			}
			if !strings.Contains(err.Error(), "offset") {
				t.Errorf("message %q does not name the offset", err)
			}
		})
	}
}

func TestLessIsTotalOrder(t *testing.T) {
	in := []string{
		`sysbox_node.web`,
		`sysbox_node.web[0]`,
		`sysbox_node.web[2]`,
		`sysbox_node.web[10]`,
		`sysbox_node.web["a"]`,
		`sysbox_node.web["b"]`,
		`sysbox_router.a`,
		`data.sysbox_artifact.a`,
		`module.a.sysbox_node.a`,
		`module.a[0].sysbox_node.a`,
		`module.a["x"].sysbox_node.a`,
		`module.a["x"].module.b.sysbox_node.a`,
		`module.b.sysbox_node.a`,
	}
	var addrs []Instance
	for _, s := range in {
		addrs = append(addrs, MustParseInstance(s))
	}
	shuffled := slices.Clone(addrs)
	slices.Reverse(shuffled)
	slices.SortFunc(shuffled, Instance.Compare)
	for i := range addrs {
		if !shuffled[i].Equal(addrs[i]) {
			t.Errorf("position %d: got %s, want %s", i, shuffled[i], addrs[i])
		}
	}
	for i, a := range addrs {
		for j, b := range addrs {
			lt, gt, eq := a.Less(b), b.Less(a), a.Equal(b)
			n := 0
			for _, x := range []bool{lt, gt, eq} {
				if x {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s vs %s: less=%v greater=%v equal=%v, want exactly one", a, b, lt, gt, eq)
			}
			if (i < j) != lt {
				t.Errorf("%s < %s: got %v, want %v", a, b, lt, i < j)
			}
		}
	}
}

func TestJSONRoundTrip(t *testing.T) {
	type doc struct {
		Addr Instance    `json:"addr"`
		Res  AbsResource `json:"res"`
		Mod  Module      `json:"mod"`
	}
	in := doc{
		Addr: MustParseInstance(`module.segment["red"].sysbox_node.target[1]`),
		Res:  MustParseInstance(`module.x.sysbox_node.y`).ContainingResource(),
		Mod:  Module{{Name: "a", Key: StringKey("b")}},
	}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"addr":"module.segment[\"red\"].sysbox_node.target[1]","res":"module.x.sysbox_node.y","mod":"module.a[\"b\"]"}`
	if string(b) != want {
		t.Errorf("json: got %s, want %s", b, want)
	}
	var out doc
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !out.Addr.Equal(in.Addr) || !out.Res.Equal(in.Res) || !out.Mod.Equal(in.Mod) {
		t.Errorf("round trip: got %+v, want %+v", out, in)
	}
	if err := json.Unmarshal([]byte(`{"addr":"sysbox_node.[0]"}`), &out); err == nil {
		t.Error("malformed address in JSON: got nil error, want one")
	}
}

func TestImmutability(t *testing.T) {
	steps := []ModuleStep{{Name: "a"}}
	m := NewModule(steps...)
	steps[0].Name = "changed"
	if m[0].Name != "a" {
		t.Errorf("NewModule shares its argument: got %q, want %q", m[0].Name, "a")
	}
	base := Module{{Name: "a"}}
	c1 := base.Child("b", NoKey)
	c2 := c1.Child("c", NoKey)
	c3 := c1.Child("d", NoKey)
	if c2.String() != "module.a.module.b.module.c" || c3.String() != "module.a.module.b.module.d" {
		t.Errorf("Child shares backing arrays: got %s and %s", c2, c3)
	}
	a := MustParseInstance(`module.a.sysbox_node.x`)
	r := a.ContainingResource()
	r.Module[0].Name = "z"
	if a.String() != `module.a.sysbox_node.x` {
		t.Errorf("ContainingResource shares the module: got %s", a)
	}
}

func TestParseModuleAndResource(t *testing.T) {
	m, err := ParseModule(`module.a["x"].module.b[3]`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.String(), `module.a["x"].module.b[3]`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	if root, err := ParseModule(""); err != nil || !root.IsRoot() {
		t.Errorf(`ParseModule(""): got %v, %v, want root`, root, err)
	}
	if _, err := ParseModule(`module.a.sysbox_node.b`); err == nil {
		t.Error("ParseModule of a resource: got nil error")
	}
	if _, err := ParseAbsResource(`sysbox_node.b[0]`); err == nil {
		t.Error("ParseAbsResource of an instance: got nil error")
	}
	r, err := ParseAbsResource(`module.a.sysbox_node.b`)
	if err != nil || r.String() != `module.a.sysbox_node.b` {
		t.Errorf("ParseAbsResource: got %v, %v", r, err)
	}
}

func TestTargetContainsAndMove(t *testing.T) {
	inst := MustParseInstance(`module.seg["red"].module.inner.sysbox_node.web[1]`)
	tests := []struct {
		target string
		want   bool
	}{
		{`module.seg["red"]`, true},
		{`module.seg["blue"]`, false},
		{`module.seg["red"].module.inner`, true},
		{`module.seg["red"].module.inner.sysbox_node.web`, true},
		{`module.seg["red"].module.inner.sysbox_node.web[1]`, true},
		{`module.seg["red"].module.inner.sysbox_node.web[0]`, false},
		{`sysbox_node.web`, false},
	}
	for _, tt := range tests {
		tg, err := ParseTarget(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := tg.Contains(inst); got != tt.want {
			t.Errorf("%s contains %s: got %v, want %v", tt.target, inst, got, tt.want)
		}
		if tg.String() != tt.target {
			t.Errorf("Target.String: got %s, want %s", tg, tt.target)
		}
	}

}

func TestModuleTargetSelectsEveryInstanceOfItsCall(t *testing.T) {
	tests := []struct {
		target, inst string
		want         bool
	}{
		{`module.bax`, `module.bax.sysbox_node.a`, true},
		{`module.bax`, `module.bax[0].sysbox_node.a`, true},
		{`module.bax`, `module.bax["a"].module.in.sysbox_node.a`, true},
		{`module.bax`, `module.baxter.sysbox_node.a`, false},
		{`module.bax[0]`, `module.bax[1].sysbox_node.a`, false},
		{`module.bax.module.in`, `module.bax[2].module.in["k"].sysbox_node.a`, true},
		{`module.bax.sysbox_node.a`, `module.bax[0].sysbox_node.a`, false}, // resource targets name one module instance
	}
	for _, tt := range tests {
		tg, err := ParseTarget(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if got := tg.Contains(MustParseInstance(tt.inst)); got != tt.want {
			t.Errorf("%s contains %s: got %v, want %v", tt.target, tt.inst, got, tt.want)
		}
	}
}

func TestPlanMove(t *testing.T) {
	state := []string{
		`sysbox_node.foo[0]`, `sysbox_node.foo[1]`, `sysbox_node.solo`, `sysbox_network.lan`,
		`module.a["x"].sysbox_node.n`, `module.a["x"].module.in.sysbox_node.m`, `module.a["y"].sysbox_node.n`,
		`module.c.sysbox_node.n`, `data.sysbox_artifact.img`,
	}
	var have []Instance
	for _, s := range state {
		have = append(have, MustParseInstance(s))
	}
	tests := []struct {
		from, to string
		want     []string // "FROM -> TO"
		err      string
	}{
		{from: `sysbox_node.foo`, to: `sysbox_node.bar`, want: []string{`sysbox_node.foo[0] -> sysbox_node.bar[0]`, `sysbox_node.foo[1] -> sysbox_node.bar[1]`}},
		{from: `sysbox_node.foo[1]`, to: `sysbox_node.foo["b"]`, want: []string{`sysbox_node.foo[1] -> sysbox_node.foo["b"]`}},
		{from: `sysbox_node.foo[1]`, to: `sysbox_node.one`, want: []string{`sysbox_node.foo[1] -> sysbox_node.one`}},
		{from: `sysbox_node.solo`, to: `sysbox_node.solo[0]`, want: []string{`sysbox_node.solo -> sysbox_node.solo[0]`}},
		{from: `sysbox_node.solo`, to: `module.c.sysbox_node.solo`, want: []string{`sysbox_node.solo -> module.c.sysbox_node.solo`}},
		{from: `data.sysbox_artifact.img`, to: `data.sysbox_artifact.kernel`, want: []string{`data.sysbox_artifact.img -> data.sysbox_artifact.kernel`}},
		{from: `module.a`, to: `module.b`, want: []string{
			`module.a["x"].module.in.sysbox_node.m -> module.b["x"].module.in.sysbox_node.m`,
			`module.a["x"].sysbox_node.n -> module.b["x"].sysbox_node.n`,
			`module.a["y"].sysbox_node.n -> module.b["y"].sysbox_node.n`}},
		{from: `module.a["x"]`, to: `module.b`, want: []string{
			`module.a["x"].module.in.sysbox_node.m -> module.b.module.in.sysbox_node.m`,
			`module.a["x"].sysbox_node.n -> module.b.sysbox_node.n`}},
		{from: `module.c`, to: `module.d[0]`, want: []string{`module.c.sysbox_node.n -> module.d[0].sysbox_node.n`}},
		{from: `sysbox_node.foo`, to: `sysbox_node.foo[0]`, err: `sysbox_node.foo has 2 instance(s)`},
		{from: `sysbox_node.foo`, to: `sysbox_node.solo`, err: `sysbox_node.solo already exists in state`},
		{from: `sysbox_node.foo[0]`, to: `sysbox_node.foo[1]`, err: `sysbox_node.foo[1] already exists in state`},
		{from: `sysbox_node.foo`, to: `sysbox_router.foo`, err: `the resource type would change from sysbox_node to sysbox_router`},
		{from: `sysbox_node.foo`, to: `data.sysbox_node.foo`, err: `the resource type would change from sysbox_node to data.sysbox_node`},
		{from: `sysbox_node.nope`, to: `sysbox_node.bar`, err: `no resource sysbox_node.nope in state`},
		{from: `module.nope`, to: `module.b`, err: `no resource in module.nope in state`},
		{from: `sysbox_node.solo`, to: `sysbox_node.solo`, err: `source and destination are the same address`},
		{from: `module.a`, to: `sysbox_node.x`, err: `a module moves only to a module`},
		{from: `sysbox_node.solo`, to: `module.x`, err: `a module moves only to a module`},
		{from: `module.a`, to: `module.a["x"].module.z`, err: `a module cannot be moved into itself`},
		{from: `module.a["x"]`, to: `module.c`, err: `module.c.sysbox_node.n already exists in state`},
		{from: `module.a`, to: `module.z[0]`, err: `module.a has several instances; module.z[0] names one`},
		{from: `module.a`, to: `module.a`, err: `a module cannot be moved into itself`},
	}
	for _, tt := range tests {
		t.Run(tt.from+" to "+tt.to, func(t *testing.T) {
			from, err := ParseTarget(tt.from)
			if err != nil {
				t.Fatal(err)
			}
			to, err := ParseTarget(tt.to)
			if err != nil {
				t.Fatal(err)
			}
			pairs, err := PlanMove(from, to, have)
			if tt.err != "" {
				var me *MoveError
				if !errors.As(err, &me) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, %v; want a MoveError containing %q", pairs, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pairs {
				got = append(got, p.From.String()+" -> "+p.To.String())
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestIdentifiersFollowHCL checks address identifiers against hclsyntax's own scanner.
func TestIdentifiersFollowHCL(t *testing.T) {
	for _, name := range []string{
		"web", "_x", "a-b", "a1", "Ünïcødé", "e\u0301", "noe\u0308l", "\u2160x", "x\u00b7y", "日本",
		"1a", "-a", "a.b", "a b", "a+b", "\u0301e", "a\u2028", "€", "a€", "", "x\u200dy",
	} {
		name := unescape(t, name)
		want := hclsyntax.ValidIdentifier(name)
		_, err := ParseInstance("sysbox_node." + name)
		if got := err == nil; got != want {
			t.Errorf("sysbox_node.%q: parsed %v (err %v), HCL says valid=%v", name, got, err, want)
		}
	}
}

func unescape(t *testing.T, s string) string {
	t.Helper()
	var out string
	if err := json.Unmarshal([]byte(`"`+s+`"`), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func FuzzParseInstance(f *testing.F) {
	for _, s := range []string{
		`sysbox_node.web`, `sysbox_node.web[0]`, `sysbox_node.web["blue"]`,
		`data.sysbox_artifact.kernel`, `module.lab.sysbox_network.dmz`,
		`module.segment["red"].sysbox_node.target[1]`, `sysbox_node.web["\u00e9\n\"x"]`,
		`module.a[0].module.b["]"].sysbox_node.c["["]`, `sysbox_node.web[01]`, `module.`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseInstance(s)
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) || pe.Offset < 0 || pe.Offset > len(s) {
				t.Fatalf("ParseInstance(%q): error %v is not a ParseError with an offset in range", s, err)
			}
			return
		}
		out := a.String()
		b, err := ParseInstance(out)
		if err != nil {
			t.Fatalf("ParseInstance(String(ParseInstance(%q))) = %q: %v", s, out, err)
		}
		if !b.Equal(a) || b.String() != out || b.UniqueKey() != a.UniqueKey() {
			t.Fatalf("round trip of %q: got %q, want %q", s, b, out)
		}
	})
}

// TestInstanceStringCache holds the cached canonical string to the fields: constructed values
// and their copies render from the cache, and a value whose fields were reassigned renders its
// new fields, never the string it was built with.
func TestInstanceStringCache(t *testing.T) {
	base := NewInstance(Module{{Name: "m", Key: IntKey(1)}}, Resource{Managed, "sysbox_node", "web"}, IntKey(0))
	parsed, err := ParseInstance(`module.m[1].sysbox_node.web[0]`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		a    func() Instance
		want string
	}{
		{"constructed", func() Instance { return base }, `module.m[1].sysbox_node.web[0]`},
		{"parsed", func() Instance { return parsed }, `module.m[1].sysbox_node.web[0]`},
		{"literal", func() Instance {
			return Instance{Module: Module{{Name: "m", Key: IntKey(1)}}, Resource: Resource{Managed, "sysbox_node", "web"}, Key: IntKey(0)}
		}, `module.m[1].sysbox_node.web[0]`},
		{"key reassigned", func() Instance { a := base; a.Key = StringKey("x"); return a }, `module.m[1].sysbox_node.web["x"]`},
		{"resource reassigned", func() Instance { a := parsed; a.Resource.Mode = Data; return a }, `module.m[1].data.sysbox_node.web[0]`},
		{"module reassigned", func() Instance { a := base; a.Module = Module{{Name: "m", Key: IntKey(2)}}; return a }, `module.m[2].sysbox_node.web[0]`},
		{"module emptied", func() Instance { a := base; a.Module = nil; return a }, `sysbox_node.web[0]`},
		{"with key", func() Instance { return base.WithKey(StringKey("y")) }, `module.m[1].sysbox_node.web["y"]`},
		{"non-canonical parse", func() Instance {
			a, err := ParseInstance(`sysbox_node.web["\u0041"]`)
			if err != nil {
				t.Fatal(err)
			}
			return a
		}, `sysbox_node.web["A"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := tt.a()
			if got := a.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if got := a.UniqueKey(); got != tt.want {
				t.Errorf("UniqueKey() = %q, want %q", got, tt.want)
			}
		})
	}
	if got := base.String(); got != `module.m[1].sysbox_node.web[0]` {
		t.Errorf("base after copies were changed: String() = %q", got)
	}
}
