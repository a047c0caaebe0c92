package states

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

var t0 = time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)

func res(lineage, addr string) *Resource {
	a := addrs.MustParseInstance(addr)
	return &Resource{
		Addr:          a,
		SchemaVersion: 1,
		Driver:        "netns",
		ExternalID:    "sbx-" + a.Resource.Name,
		Attributes:    json.RawMessage(`{"hostname":"web","env":{"TOKEN":"secret://env/TOKEN"}}`),
		Attachments: []substrate.AttachmentState{{
			Name: "eth0", MAC: "02:00:00:00:00:01", IPv4: []string{"198.51.100.10/24"},
			Private: substrate.Envelope{Driver: "netns", Version: 1, Data: json.RawMessage(`{"veth":"sbx0"}`)},
		}},
		Observation: Observation{Status: substrate.Present, At: t0},
		Owner:       substrate.Owner{Topology: lineage, Address: addr, Type: a.Resource.Type, Generation: 1},
		Private:     &substrate.Envelope{Driver: "netns", Version: 2, Data: json.RawMessage(`{"netns":"sbx-web","pid":42}`)},
		CreatedAt:   t0,
		UpdatedAt:   t0.In(time.FixedZone("CET", 3600)),
	}
}

func sample() *State {
	st := &State{Lineage: "4b1f3c0e-8f4e-4d0a-9a57-3f2b1c0d9e8a", Serial: 7, ToolVersion: "v0.1.0",
		Outputs: map[string]Output{"web_ip": {Value: json.RawMessage(`"198.51.100.10"`)}}}
	for _, a := range []string{`sysbox_node.web["blue"]`, "module.lab.sysbox_network.dmz", "sysbox_node.web[0]", "sysbox_network.lan"} {
		st.Set(res(st.Lineage, a))
	}
	st.Resources[0].Dependencies = []addrs.Instance{addrs.MustParseInstance("sysbox_network.lan")}
	return st
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	st := sample()
	b, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil {
		t.Fatalf("Decode: %v\n%s", err, b)
	}
	want := st.Clone()
	for _, r := range want.Resources {
		r.UpdatedAt = r.UpdatedAt.UTC()
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b addrs.Instance) bool { return a.Equal(b) })); d != "" {
		t.Fatalf("round trip (-want +got):\n%s", d)
	}
	if !strings.Contains(string(b), `"updated_at":"2026-11-29T20:00:00Z"`) {
		t.Errorf("timestamps not UTC:\n%s", b)
	}
	b2, _ := Encode(got)
	if !bytes.Equal(b, b2) {
		t.Errorf("re-encoding differs:\n%s\n---\n%s", b, b2)
	}
}

func TestEncodeIsSortedOnePerLine(t *testing.T) {
	st := sample()
	// Shuffle: Encode must not depend on slice order.
	st.Resources[0], st.Resources[3] = st.Resources[3], st.Resources[0]
	b, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	var addrsInOrder []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, `    {"address":`) {
			var r struct{ Address string }
			json.Unmarshal([]byte(strings.TrimSuffix(line, ",")), &r)
			addrsInOrder = append(addrsInOrder, r.Address)
		}
	}
	want := []string{"sysbox_network.lan", "sysbox_node.web[0]", `sysbox_node.web["blue"]`, "module.lab.sysbox_network.dmz"}
	if d := cmp.Diff(want, addrsInOrder); d != "" {
		t.Fatalf("resource lines (-want +got):\n%s\n%s", d, b)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	s := string(good)
	noOwner := sample()
	noOwner.Resources[1].Owner = substrate.Owner{}
	noOwnerB, _ := Encode(noOwner)
	foreign := sample()
	foreign.Resources[2].Owner.Topology = "another-lineage"
	foreignB, _ := Encode(foreign)
	noSchema := sample()
	noSchema.Resources[0].SchemaVersion = 0
	noSchemaB, _ := Encode(noSchema)
	badStatus := sample()
	badStatus.Resources[0].Observation.Status = "running"
	badStatusB, _ := Encode(badStatus)
	dup := sample()
	dup.Resources = append(dup.Resources, dup.Resources[0].Clone())
	dupB := []byte(strings.Replace(string(mustEncode(t, sample())), `"resources": [`, `"resources": [`+"\n    "+mustLine(t, sample().Resources[0])+",", 1))
	_ = dup

	tests := []struct {
		name  string
		data  []byte
		is    error
		as    any
		wants string
	}{
		{"torn tail", good[:len(good)/2], durable.ErrCorrupt, new(*CorruptError), "torn or truncated"},
		{"empty file", nil, durable.ErrCorrupt, new(*CorruptError), "torn"},
		{"edited attribute", []byte(strings.Replace(s, `"hostname":"web"`, `"hostname":"www"`, 1)), durable.ErrCorrupt, new(*CorruptError), "checksum mismatch"},
		{"edited serial", []byte(strings.Replace(s, `"serial": 7`, `"serial": 8`, 1)), durable.ErrCorrupt, new(*CorruptError), "checksum mismatch"},
		{"newer format", []byte(strings.Replace(s, `"format_version": 1`, `"format_version": 2`, 1)), durable.ErrUnknownVersion, new(*UnsupportedVersionError), "upgrade sysbox"},
		{"no format version", []byte(`{"lineage":"x","serial":1,"resources":[]}`), durable.ErrUnknownVersion, new(*UnsupportedVersionError), "version 0"},
		{"missing ownership", noOwnerB, ErrIncompatible, new(*IncompatibleStateError), "owner.topology, owner.address, owner.type, owner.generation"},
		{"foreign owner", foreignB, ErrIncompatible, new(*IncompatibleStateError), "owner.topology matching lineage"},
		{"missing schema version", noSchemaB, ErrIncompatible, new(*IncompatibleStateError), "missing schema_version"},
		{"invalid status", badStatusB, durable.ErrCorrupt, new(*CorruptError), `"running" is not one of`},
		{"duplicate address", rechecksum(t, dupB), durable.ErrCorrupt, new(*CorruptError), "appears twice"},
		{"unknown field", rechecksum(t, []byte(strings.Replace(s, `"schema_version":1`, `"schema_version":1,"frobs":3`, 1))), durable.ErrCorrupt, new(*CorruptError), "unknown field"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Decode(tt.data)
			if st != nil || !errors.Is(err, tt.is) || !errors.As(err, tt.as) || !strings.Contains(err.Error(), tt.wants) {
				t.Fatalf("got %v, %v; want nil and an error matching %v containing %q", st, err, tt.is, tt.wants)
			}
		})
	}
}

func mustEncode(t *testing.T, st *State) []byte {
	b, err := Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustLine(t *testing.T, r *Resource) string {
	c := *r
	c.UpdatedAt = c.UpdatedAt.UTC()
	b, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rechecksum recomputes the checksum of a hand-edited document, so that a test reaches the
// checks behind the checksum.
func rechecksum(t *testing.T, b []byte) []byte {
	var h header
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	return []byte(strings.Replace(string(b), h.SHA256, checksum(h.Lineage, h.Serial, h.Resources, h.Outputs), 1))
}

func TestDataResourcesNeedNoOwner(t *testing.T) {
	st := &State{Lineage: NewLineage(), Serial: 1}
	st.Set(&Resource{Addr: addrs.MustParseInstance("data.sysbox_artifact.kernel"), Observation: Observation{Status: substrate.Present}})
	if _, err := Decode(mustEncode(t, st)); err != nil {
		t.Fatalf("got %v, want data resource accepted without owner", err)
	}
}

func TestCheckExtraRequirement(t *testing.T) {
	st := sample()
	st.Resources[2].ExternalID = ""
	err := Check(st, func(r *Resource) []string {
		if r.ExternalID == "" {
			return []string{"external_id"}
		}
		return nil
	})
	var ie *IncompatibleStateError
	if !errors.As(err, &ie) || len(ie.Problems) != 1 || !strings.Contains(ie.Problems[0], `sysbox_node.web["blue"]: missing external_id`) {
		t.Fatalf("got %v, want one problem naming sysbox_node.web[\"blue\"] external_id", err)
	}
}

func TestMove(t *testing.T) {
	tests := []struct {
		name, from, to string
		moves          map[string]string // from → to, every resource that must move
		wantErr        string
	}{
		{name: "rename instance", from: "sysbox_node.web[0]", to: "sysbox_node.app", moves: map[string]string{"sysbox_node.web[0]": "sysbox_node.app"}},
		{name: "whole resource", from: "sysbox_node.web", to: "sysbox_node.front", moves: map[string]string{
			"sysbox_node.web[0]": "sysbox_node.front[0]", `sysbox_node.web["blue"]`: `sysbox_node.front["blue"]`}},
		{name: "count to for_each", from: "sysbox_node.web[0]", to: `sysbox_node.web["red"]`, moves: map[string]string{"sysbox_node.web[0]": `sysbox_node.web["red"]`}},
		{name: "into module", from: "sysbox_network.lan", to: `module.seg["red"].sysbox_network.lan`, moves: map[string]string{"sysbox_network.lan": `module.seg["red"].sysbox_network.lan`}},
		{name: "whole module", from: "module.lab", to: `module.lab2["x"]`, moves: map[string]string{"module.lab.sysbox_network.dmz": `module.lab2["x"].sysbox_network.dmz`}},
		{name: "missing source", from: "sysbox_node.nope", to: "sysbox_node.app", wantErr: "no resource sysbox_node.nope in state"},
		{name: "destination taken", from: "sysbox_node.web[0]", to: `sysbox_node.web["blue"]`, wantErr: "already exists"},
		{name: "resource type change", from: "sysbox_node.web", to: "sysbox_network.lan", wantErr: "resource type would change"},
		{name: "resource to instance", from: "sysbox_node.web", to: "sysbox_node.app[0]", wantErr: "has 2 instance(s)"},
		{name: "type change", from: "sysbox_node.web[0]", to: "sysbox_network.web", wantErr: "resource type would change"},
		{name: "same address", from: "sysbox_node.web[0]", to: "sysbox_node.web[0]", wantErr: "same address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := sample()
			before := st.Clone()
			from, err := addrs.ParseTarget(tt.from)
			if err != nil {
				t.Fatal(err)
			}
			to, err := addrs.ParseTarget(tt.to)
			if err != nil {
				t.Fatal(err)
			}
			pairs, err := st.Move(from, to, t0.Add(time.Hour))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want error containing %q", err, tt.wantErr)
				}
				if !bytes.Equal(mustEncode(t, st), mustEncode(t, before)) {
					t.Fatalf("failed move changed the state")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(pairs) != len(tt.moves) {
				t.Fatalf("got %d moves %v, want %d", len(pairs), pairs, len(tt.moves))
			}
			for _, p := range pairs {
				if want := tt.moves[p.From.String()]; p.To.String() != want {
					t.Errorf("got %s moved to %s, want %q", p.From, p.To, want)
				}
				if st.Resource(p.From) != nil {
					t.Fatalf("got %s still present, want moved", p.From)
				}
				got, old := st.Resource(p.To), before.Resource(p.From)
				if got == nil || got.ExternalID != old.ExternalID || got.Owner != old.Owner || string(got.Private.Data) != string(old.Private.Data) {
					t.Fatalf("got %+v, want the same object (external id, owner markers, private envelope) at %s", got, p.To)
				}
				for _, r := range st.Resources {
					for _, d := range r.Dependencies {
						if d.Equal(p.From) {
							t.Fatalf("%s still depends on %s", r.Addr, p.From)
						}
					}
				}
			}
			if len(st.Resources) != len(before.Resources) {
				t.Fatalf("got %d resources, want %d", len(st.Resources), len(before.Resources))
			}
			if _, err := Decode(mustEncode(t, st)); err != nil {
				t.Fatalf("moved state does not decode: %v", err)
			}
		})
	}
}

func TestRemoveAndSet(t *testing.T) {
	st := sample()
	a := addrs.MustParseInstance("sysbox_node.web[0]")
	if !st.Remove(a) || st.Remove(a) || st.Resource(a) != nil || len(st.Resources) != 3 {
		t.Fatalf("remove: got %d resources, want 3 and a second remove to report false", len(st.Resources))
	}
	st.Set(res(st.Lineage, "sysbox_node.a"))
	st.Set(res(st.Lineage, "sysbox_node.a"))
	if got := len(st.Resources); got != 4 {
		t.Fatalf("got %d resources after setting one twice, want 4", got)
	}
	for i := 1; i < len(st.Resources); i++ {
		if !st.Resources[i-1].Addr.Less(st.Resources[i].Addr) {
			t.Fatalf("not sorted at %d: %s, %s", i, st.Resources[i-1].Addr, st.Resources[i].Addr)
		}
	}
}

func TestNewLineageIsUUIDv4(t *testing.T) {
	a, b := NewLineage(), NewLineage()
	if a == b || len(a) != 36 || a[14] != '4' || !strings.ContainsRune("89ab", rune(a[19])) {
		t.Fatalf("got %q and %q, want two distinct v4 UUIDs", a, b)
	}
}

func TestReadHeader(t *testing.T) {
	b := mustEncode(t, sample())
	h, err := ReadHeader(bytes.NewReader(b[:300])) // the header fits well within the first bytes
	if err != nil {
		t.Fatal(err)
	}
	want := Header{FormatVersion: 1, ToolVersion: "v0.1.0", Lineage: "4b1f3c0e-8f4e-4d0a-9a57-3f2b1c0d9e8a", Serial: 7}
	if h != want {
		t.Fatalf("got %+v, want %+v", h, want)
	}
	newer := []byte(strings.Replace(string(b), `"format_version": 1`, `"format_version": 9`, 1))
	if _, err := ReadHeader(bytes.NewReader(newer)); !errors.Is(err, durable.ErrUnknownVersion) {
		t.Fatalf("newer: got %v, want ErrUnknownVersion", err)
	}
	if _, err := ReadHeader(strings.NewReader(`{"format_vers`)); !errors.Is(err, durable.ErrCorrupt) {
		t.Fatalf("torn: got %v, want ErrCorrupt", err)
	}
}

// TestHeaderFieldsOneList: every JSON field of Header is a key of Header.field, the one list
// ReadHeader and Decode share, and the two readers agree on a document's header.
func TestHeaderFieldsOneList(t *testing.T) {
	var h Header
	rt := reflect.TypeOf(h)
	for i := 0; i < rt.NumField(); i++ {
		key, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		dst, ok := h.field(key)
		if !ok {
			t.Errorf("Header.%s (json %q) is not a key of Header.field", rt.Field(i).Name, key)
			continue
		}
		if got, want := reflect.ValueOf(dst).Pointer(), reflect.ValueOf(&h).Elem().Field(i).Addr().Pointer(); got != want {
			t.Errorf("Header.field(%q) points elsewhere than Header.%s", key, rt.Field(i).Name)
		}
	}
	if _, ok := h.field("sha256"); ok {
		t.Error(`Header.field("sha256") = ok, want not a header key`)
	}
	b := mustEncode(t, sample())
	rh, err := ReadHeader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	st, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Header{FormatVersion: FormatVersion, ToolVersion: st.ToolVersion, Lineage: st.Lineage, Serial: st.Serial}); rh != want {
		t.Fatalf("ReadHeader: got %+v, Decode read %+v", rh, want)
	}
}

// A state file laid out differently (reformatted by hand, two resources on a line) decodes to
// the same state as long as its checksum matches.
func TestDecodeOtherLayouts(t *testing.T) {
	st := sample()
	b := mustEncode(t, st)
	var h header
	if err := json.Unmarshal(b, &h); err != nil {
		t.Fatal(err)
	}
	var indented bytes.Buffer
	json.Indent(&indented, h.Resources, "  ", "\t")
	oneLine := strings.ReplaceAll(string(h.Resources), ",\n    {", ",{")
	for name, res := range map[string]string{"indented": indented.String(), "one line": oneLine} {
		t.Run(name, func(t *testing.T) {
			doc := rechecksum(t, []byte(strings.Replace(string(b), string(h.Resources), res, 1)))
			got, err := Decode(doc)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if string(mustEncode(t, got)) != string(b) {
				t.Fatalf("re-encoded state differs from the original")
			}
		})
	}
}

// TestMoveSharedDependencies: dependency lists may be shared (the decoder and the planner
// share them); Move rewrites each resource's list without touching the shared one.
func TestMoveSharedDependencies(t *testing.T) {
	st := sample()
	shared := []addrs.Instance{addrs.MustParseInstance("sysbox_network.lan")}
	for _, r := range st.Resources[1:] {
		r.Dependencies = shared
	}
	to := addrs.MustParseInstance("sysbox_network.core")
	from, _ := addrs.ParseTarget("sysbox_network.lan")
	toT, _ := addrs.ParseTarget(to.String())
	if _, err := st.Move(from, toT, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, want := shared[0].String(), "sysbox_network.lan"; got != want {
		t.Errorf("shared list: got %s, want %s (unchanged)", got, want)
	}
	for _, r := range st.Resources {
		for _, d := range r.Dependencies {
			if got, want := d.String(), to.String(); got != want {
				t.Errorf("%s depends on %s, want %s", r.Addr, got, want)
			}
		}
	}
}

// A shallow copy stays what s was when s's resources and outputs are then replaced or removed
// (the executor's copy-on-write changes), and encodes like a deep clone.
func TestShallowCopyIsolatedFromReplacements(t *testing.T) {
	st := sample()
	want, err := Encode(st.Clone())
	if err != nil {
		t.Fatal(err)
	}
	snap := st.ShallowCopy()
	c := st.Resources[0].Clone()
	c.ExternalID = "replaced"
	st.Set(c)
	st.Remove(st.Resources[1].Addr)
	st.Set(res(st.Lineage, "sysbox_node.added"))
	st.Outputs = map[string]Output{"other": {Value: json.RawMessage(`1`)}}
	st.Serial++
	got, err := Encode(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("shallow copy changed with the original:\ngot  %s\nwant %s", got, want)
	}
}
