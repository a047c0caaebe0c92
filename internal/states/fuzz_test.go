package states

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzDecode: no input panics Decode, and whatever Decode accepts re-encodes to a document
// that decodes to the same bytes again (Encode∘Decode is a fixed point).
func FuzzDecode(f *testing.F) {
	good, err := Encode(sample())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"format_version":1,"lineage":"x","serial":1,"resources":[],"outputs":{},"sha256":""}`))
	empty, _ := Encode(&State{Lineage: "l"})
	f.Add(empty)
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := Decode(data)
		if err != nil {
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted a document that is not JSON:\n%s", data)
		}
		once, err := Encode(st)
		if err != nil {
			t.Fatalf("accepted state does not encode: %v", err)
		}
		st2, err := Decode(once)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v\n%s", err, once)
		}
		twice, _ := Encode(st2)
		if !bytes.Equal(once, twice) {
			t.Fatalf("not a fixed point:\n%s\n---\n%s", once, twice)
		}
	})
}

// FuzzDecodeResources fuzzes the resources array behind a valid checksum, so that inputs reach
// the resource decoding and checks.
func FuzzDecodeResources(f *testing.F) {
	good, _ := Encode(sample())
	var h header
	if err := jsonUnmarshal(good, &h); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(h.Resources))
	f.Add([]byte(`[]`))
	f.Add([]byte("[\n    {\"address\":\"data.x.y\",\"schema_version\":0,\"observation\":{\"status\":\"present\"}}\n  ]"))
	f.Fuzz(func(t *testing.T, res []byte) {
		lineage := "4b1f3c0e-8f4e-4d0a-9a57-3f2b1c0d9e8a"
		doc := []byte(`{"format_version":1,"tool_version":"f","lineage":"` + lineage + `","serial":7,"resources":` + string(res) +
			`,"outputs":{},"sha256":"` + checksum(lineage, 7, res, []byte(`{}`)) + `"}`)
		st, err := Decode(doc)
		if err != nil {
			return
		}
		if !json.Valid(doc) {
			t.Fatalf("accepted a document that is not JSON:\n%s", doc)
		}
		once, err := Encode(st)
		if err != nil {
			t.Fatalf("accepted state does not encode: %v", err)
		}
		st2, err := Decode(once)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v\n%s", err, once)
		}
		if twice, _ := Encode(st2); !bytes.Equal(once, twice) {
			t.Fatalf("not a fixed point:\n%s\n---\n%s", once, twice)
		}
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
