package handlers

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDiffAttrsSameObject: the same object on both sides takes a shortcut; its result must be
// what the full comparison gives for an equal object written differently (trailing space), and
// inputs that are not one JSON object still fail as before.
func TestDiffAttrsSameObject(t *testing.T) {
	tests := []struct {
		name    string
		attrs   string
		wantErr bool
	}{
		{"empty object", `{}`, false},
		{"node", `{"driver":"netns","command":["sleep","infinity"],"attachment":{"lan":{"network":"sysbox_network.lan[0]","ipv4":["198.18.0.10/24"],"mac":"02:00:00:00:00:01"}}}`, false},
		{"leading space", ` {"a":1}`, false},
		{"null", `null`, false},
		{"array", `[1]`, true},
		{"truncated", `{"a":`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			same := []byte(tt.attrs)
			got, err := diffAttrs(same, append([]byte(nil), same...), nodeRules, "")
			if (err != nil) != tt.wantErr {
				t.Fatalf("got error %v, want error %v", err, tt.wantErr)
			}
			want, werr := diffAttrs(same, []byte(tt.attrs+" "), nodeRules, "")
			if tt.wantErr {
				if werr == nil || err.Error() != werr.Error() {
					t.Errorf("got error %v, want %v", err, werr)
				}
				return
			}
			if werr != nil {
				t.Fatal(werr)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("same object (-full comparison +shortcut):\n%s", d)
			}
		})
	}
}
