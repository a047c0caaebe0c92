package substrate_test

import (
	"strings"
	"testing"

	"zyvor.dev/sysbox/pkg/substrate"
)

func TestSealOpen(t *testing.T) {
	type priv struct {
		ID string `json:"id"`
	}
	env := substrate.Seal("d", 2, priv{ID: "x"})
	var got priv
	if err := env.Open("d", 2, &got); err != nil || got.ID != "x" {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	for name, tc := range map[string]struct {
		env  substrate.Envelope
		want string
	}{
		"other driver":  {env, `belongs to driver "d", not "e"`},
		"newer version": {substrate.Seal("e", 3, priv{}), "version 3: driver e knows versions 1..2; upgrade sysbox"},
		"version 0":     {substrate.Envelope{Driver: "e", Data: []byte(`{}`)}, "version 0"},
		"bad data":      {substrate.Envelope{Driver: "e", Version: 1, Data: []byte(`[`)}, "envelope data"},
	} {
		if err := tc.env.Open("e", 2, new(priv)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", name, err, tc.want)
		}
	}
}
