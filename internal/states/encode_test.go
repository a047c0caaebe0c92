package states

import (
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// The hand-written encoder must produce what encoding/json produces, for ordinary and awkward
// values alike.
func TestAppendResourceMatchesEncodingJSON(t *testing.T) {
	awkward := res("l", `sysbox_node.web["<b>&\"x\"\u2028é"]`)
	awkward.Owner.Topology = "l"
	awkward.Driver = "tab\there"
	awkward.Attributes = json.RawMessage(" { \"a\" : [1, 2 ,\"<&>\"] ,\n\"b\":\"\u2028\" } ")
	awkward.Observation = Observation{Status: substrate.Degraded, Reason: "eth1 missing\x01", At: time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("X", -3600))}
	awkward.Attachments[0].IPv4 = nil
	awkward.Attachments[0].Private.Data = nil
	awkward.Dependencies = []addrs.Instance{addrs.MustParseInstance(`module.m[3].sysbox_network.n["a b"]`)}
	bare := &Resource{Addr: addrs.MustParseInstance("data.sysbox_artifact.k")}
	tests := map[string]*Resource{"ordinary": res("l", "sysbox_node.web[0]"), "awkward": awkward, "bare": bare}
	for name, r := range tests {
		t.Run(name, func(t *testing.T) {
			want, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendResource(nil, r)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
	if _, err := appendResource(nil, &Resource{Attributes: json.RawMessage(`{"a":`)}); err == nil {
		t.Fatalf("invalid attributes: got nil error")
	}
}

// If someone adds a field to a type appendResource encodes, this fails until the encoder
// learns it (else the field would be silently dropped from state).
func TestAppendResourceKnowsEveryField(t *testing.T) {
	known := map[reflect.Type][]string{
		reflect.TypeFor[Resource]():                  {"address", "schema_version", "driver", "external_id", "attributes", "dependencies", "attachments", "observation", "owner", "private", "created_at", "updated_at"},
		reflect.TypeFor[Observation]():               {"status", "reason", "at"},
		reflect.TypeFor[substrate.Owner]():           {"topology", "address", "type", "generation"},
		reflect.TypeFor[substrate.Envelope]():        {"driver", "version", "data"},
		reflect.TypeFor[substrate.AttachmentState](): {"name", "mac", "ipv4", "gateway", "private"},
	}
	for typ, want := range known {
		var got []string
		for f := range typ.Fields() {
			name, _, _ := cutComma(f.Tag.Get("json"))
			got = append(got, name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s fields: got %v, want %v (update appendResource)", typ, got, want)
		}
	}
}

func cutComma(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
