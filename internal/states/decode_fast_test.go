package states

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"zyvor.dev/sysbox/internal/addrs"
)

func jsonResource(line []byte) (*Resource, error) {
	var r Resource
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return nil, err
	}
	return &r, nil
}

var instanceCmp = cmp.Comparer(func(a, b addrs.Instance) bool { return a.Equal(b) })

// checkFast asserts that whenever the fast path accepts a line, encoding/json accepts it too
// and decodes the same value.
func checkFast(t *testing.T, line []byte) (accepted bool) {
	t.Helper()
	fast, ok := fastResource(line)
	if !ok {
		return false
	}
	slow, err := jsonResource(line)
	if err != nil {
		t.Fatalf("fast path accepted what encoding/json refuses (%v):\n%s", err, line)
	}
	if d := cmp.Diff(slow, fast, instanceCmp); d != "" {
		t.Fatalf("fast path differs from encoding/json (-json +fast):\n%s\n%s", d, line)
	}
	// The same line twice through one depLists: the second decode takes the shared list.
	seen := depLists{}
	for i := range 2 {
		shared, ok := fastResourceShared(line, seen)
		if !ok {
			t.Fatalf("decode %d with shared dependency lists refused a line fastResource accepts:\n%s", i, line)
		}
		if d := cmp.Diff(slow, shared, instanceCmp); d != "" {
			t.Fatalf("decode %d with shared dependency lists differs from encoding/json (-json +fast):\n%s\n%s", i, d, line)
		}
	}
	return true
}

func TestFastResourceMatchesEncodingJSON(t *testing.T) {
	st := sample()
	st.Resources[0].Attributes = json.RawMessage(`{"n":null,"a":[1,{"b":"}]"}],"s":"x\"y"}`)
	st.Resources[1].Private = nil
	st.Resources[1].Attachments[0].IPv4 = nil
	st.Resources[1].Attachments[0].Gateway = "198.51.100.1"
	st.Resources[2].Observation.Reason = "eth1 missing"
	st.Resources[2].Dependencies = nil
	for _, r := range st.Resources {
		line, err := appendResource(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		if !checkFast(t, line) {
			t.Errorf("fast path refused a canonical line:\n%s", line)
		}
	}
	// Lines the fast path must hand to encoding/json.
	canon, _ := appendResource(nil, st.Resources[3])
	tests := map[string]string{
		"escaped string":  string(bytes.Replace(canon, []byte(`"driver":"netns"`), []byte(`"driver":"net\u006es"`), 1)),
		"non-ASCII":       string(bytes.Replace(canon, []byte(`"driver":"netns"`), []byte(`"driver":"nétns"`), 1)),
		"other key order": string(bytes.Replace(canon, []byte(`"schema_version":1,"driver":"netns"`), []byte(`"driver":"netns","schema_version":1`), 1)),
		"unknown field":   string(bytes.Replace(canon, []byte(`"driver":"netns"`), []byte(`"driver":"netns","x":1`), 1)),
		"whitespace":      string(bytes.Replace(canon, []byte(`"driver":"netns"`), []byte(`"driver": "netns"`), 1)),
		"float version":   string(bytes.Replace(canon, []byte(`"schema_version":1`), []byte(`"schema_version":1.0`), 1)),
		"trailing data":   string(canon) + " ",
	}
	for name, line := range tests {
		t.Run(name, func(t *testing.T) {
			if checkFast(t, []byte(line)) {
				t.Fatalf("fast path accepted a non-canonical line:\n%s", line)
			}
		})
	}
}

func FuzzFastResource(f *testing.F) {
	for _, r := range sample().Resources {
		line, _ := appendResource(nil, r)
		f.Add(line)
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		if !json.Valid(line) {
			return // the document is validated as a whole before lines are decoded
		}
		checkFast(t, line)
	})
}
