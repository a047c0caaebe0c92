package plans

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
)

// TestActionsDigestMatchesJSON holds ActionsDigest to its definition: the SHA-256 of
// json.Marshal of the actions (an encoding error hashes json.Marshal's nil result).
func TestActionsDigestMatchesJSON(t *testing.T) {
	for _, tt := range actionsEncodingCases() {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := json.Marshal(tt.actions)
			sum := sha256.Sum256(b)
			want := "sha256:" + hex.EncodeToString(sum[:])
			if got := ActionsDigest(tt.actions); got != want {
				t.Errorf("got %s, want %s (of %s)", got, want, b)
			}
		})
	}
}

// TestStoredJSON: the plan file's payload is json.Marshal of the plan without its format
// version, whatever the actions hold (an action encoding/json cannot encode fails both ways).
func TestStoredJSON(t *testing.T) {
	fp := Fingerprint{SourceDigest: "sha256:s", Lineage: "l<&>", Serial: 3, SchemaVersions: map[string]int{"b": 1, "a": 2},
		Drivers: []driver.Descriptor{{Name: "netns", Version: "1"}}, Artifacts: map[string]string{"x": "y"}}
	for _, tt := range actionsEncodingCases() {
		for _, targets := range [][]string{nil, {}, {"sysbox_node.a", "<b>"}} {
			t.Run(tt.name, func(t *testing.T) {
				p := &Plan{FormatVersion: "1.0", ToolVersion: "v&1", Mode: "normal", Targets: targets, Actions: tt.actions, Fingerprint: fp}
				stored := *p
				stored.FormatVersion = ""
				want, wantErr := json.Marshal(&stored)
				got, err := storedJSON(p)
				if (err != nil) != (wantErr != nil) || string(got) != string(want) {
					t.Errorf("got %s (%v), want %s (%v)", got, err, want, wantErr)
				}
				// the whole file: the record EncodeRecord makes of the plan, and a newline
				path := filepath.Join(t.TempDir(), "p.plan")
				err = WriteFile(path, p)
				rec, wantErr := durable.EncodeRecord(RecordKind, recordVersion, &stored)
				if (err != nil) != (wantErr != nil) {
					t.Fatalf("WriteFile: got %v, want %v", err, wantErr)
				}
				if err == nil {
					if file, _ := os.ReadFile(path); string(file) != string(rec)+"\n" {
						t.Errorf("plan file: got %s, want %s", file, rec)
					}
				}
			})
		}
	}
}

type actionsCase struct {
	name    string
	actions []ResourceAction
}

func actionsEncodingCases() []actionsCase {
	node := addrs.MustParseInstance(`module.seg["red"].sysbox_node.web[3]`)
	full := ResourceAction{Address: node, Action: Replace, Reason: "image changed", Type: "sysbox_node", Mode: "managed", SchemaVersion: 2,
		Before: json.RawMessage(`{"a":1}`), After: json.RawMessage(`{"a":2}`),
		Changes:   []AttrChange{{Path: "image", Before: json.RawMessage(`"x"`), After: json.RawMessage(`"y"`), Effect: "replace", Why: "forces replacement"}},
		DependsOn: []addrs.Instance{addrs.MustParseInstance("sysbox_network.lan[0]"), addrs.MustParseInstance(`sysbox_network.seg["a\"b"]`)},
		Driver:    "netns", Requires: []driver.Capability{"nodes", "nics"}}
	with := func(f func(a *ResourceAction)) []ResourceAction {
		a := full
		f(&a)
		return []ResourceAction{a}
	}
	return []actionsCase{
		{"nil", nil},
		{"empty", []ResourceAction{}},
		{"zero action", []ResourceAction{{}}},
		{"every field", []ResourceAction{full, full}},
		{"omitted fields", with(func(a *ResourceAction) {
			a.Before, a.After, a.Changes, a.DependsOn, a.Driver, a.Requires = nil, json.RawMessage{}, []AttrChange{}, []addrs.Instance{}, "", []driver.Capability{}
		})},
		{"html in strings", with(func(a *ResourceAction) { a.Reason, a.Type, a.Driver = "a <b> & c", "x>y", "d&" })},
		{"escapes in strings", with(func(a *ResourceAction) { a.Reason, a.Mode = "tab\there \"q\" \\ nl\n", "\x01\x7f" })},
		{"non-ASCII and invalid UTF-8", with(func(a *ResourceAction) { a.Reason, a.Driver = "é \u2028 \u2029", "\xff\xfe" })},
		{"address keys needing escapes", with(func(a *ResourceAction) {
			a.Address = addrs.NewInstance(nil, addrs.Resource{Type: "sysbox_node", Name: "n"}, addrs.StringKey("<&>é\u2028"))
		})},
		{"raw JSON with spaces and html", with(func(a *ResourceAction) {
			a.Before, a.After = json.RawMessage(" { \"a\" : [ 1 , \"<b>\" ] }\n"), json.RawMessage(`{"s":"&\u2028"}`)
		})},
		{"invalid raw JSON", with(func(a *ResourceAction) { a.After = json.RawMessage(`{"a":`) })},
		{"invalid raw JSON in a change", with(func(a *ResourceAction) {
			a.Changes = []AttrChange{{Path: "p", After: json.RawMessage(`nope`)}}
		})},
		{"raw JSON with spaces only", with(func(a *ResourceAction) { a.Before = json.RawMessage("{ \"a\" :\t[1, 2]\n}") })},
		{"raw JSON with U+2028", with(func(a *ResourceAction) { a.After = json.RawMessage("{\"s\":\"a\u2028b\u2029\"}") })},
		{"shared dependency lists", func() []ResourceAction {
			x, y, z := full, full, full
			y.Address = addrs.MustParseInstance("sysbox_node.web[4]")
			z.DependsOn = full.DependsOn[:1] // the same array, shorter
			return []ResourceAction{x, y, z, x}
		}()},
		{"negative schema version", with(func(a *ResourceAction) { a.SchemaVersion = -7 })},
	}
}
