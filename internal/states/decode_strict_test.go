package states

import (
	"encoding/json"
	"strings"
	"testing"
)

// Decode no longer runs json.Valid over the whole document (readDocument): these documents
// carry a valid checksum but are not JSON, and each must be refused by the reader of the part
// it breaks.
func TestDecodeRefusesInvalidJSONBehindValidChecksum(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	var h header
	if err := json.Unmarshal(good, &h); err != nil {
		t.Fatal(err)
	}
	res, out := string(h.Resources), string(h.Outputs)
	if strings.Count(res, "},\n") < 2 {
		t.Fatalf("sample has too few resources for these cases:\n%s", res)
	}
	lineage := h.Lineage
	doc := func(res, out, between, tail string) []byte {
		return []byte(`{"format_version":1,"tool_version":"t","lineage":"` + lineage + `","serial":7` + between + `"resources":` + res +
			`,"outputs":` + out + `,"sha256":"` + checksum(lineage, 7, []byte(res), []byte(out)) + `"}` + tail)
	}
	if _, err := Decode(doc(res, out, ",", "\n")); err != nil {
		t.Fatalf("the valid document is refused: %v", err)
	}
	lastLine := strings.LastIndex(res, "}")
	cases := map[string][]byte{
		"missing comma between resources": doc(strings.Replace(res, "},\n", "}\n", 1), out, ",", ""),
		"comma after the last resource":   doc(res[:lastLine+1]+","+res[lastLine+1:], out, ",", ""),
		"leading zero":                    doc(strings.Replace(res, `"schema_version":1`, `"schema_version":01`, 1), out, ",", ""),
		"vertical tab before a resource":  doc(strings.Replace(res, "\n", "\n\v", 1), out, ",", ""),
		"two resources on one line":       doc(strings.Replace(res, "},\n", "} ", 1), out, ",", ""),
		"data after the document":         doc(res, out, ",", "x"),
		"second document":                 doc(res, out, ",", "{}"),
		"missing comma between fields":    doc(res, out, " ", ""),
		"double comma between fields":     doc(res, out, ",,", ""),
		"data after the outputs":          doc(res, out+" {}", ",", ""),
		"truncated":                       doc(res, out, ",", "")[:len(good)/2],
	}
	for name, d := range cases {
		t.Run(name, func(t *testing.T) {
			if json.Valid(d) {
				t.Fatalf("case is valid JSON, it tests nothing:\n%s", d)
			}
			if _, err := Decode(d); err == nil {
				t.Fatalf("Decode accepted a document that is not JSON:\n%s", d)
			}
		})
	}
}

func TestValueEndStopsAtTheText(t *testing.T) {
	for _, in := range []string{`"abc`, `"a\"`, `"a\\\"`, `{"a":[1,2}`, `[`} {
		if _, ok := valueEnd([]byte(in), 0); ok {
			t.Errorf("valueEnd(%q) ok, want false (the text ends inside the value)", in)
		}
	}
	for in, want := range map[string]int{
		`{"a":"}"} x`:        9,
		`"a\\" x`:            5,
		`"a\\\"b" x`:         8,
		`["\\\\",{"x":[]}],`: 17,
		`123,`:               3,
		`true}`:              4,
		`{"a":"\"]"}]`:       11,
	} {
		if end, ok := valueEnd([]byte(in), 0); !ok || end != want {
			t.Errorf("valueEnd(%q) = %d, %v; want %d, true", in, end, ok, want)
		}
	}
}
