package states

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// The on-disk format, pinned: a change to it shows up as a diff of testdata/sample.sbxstate and
// needs a FormatVersion decision. Regenerate with `go test ./internal/states -run Golden -update`.
func TestGoldenFormat(t *testing.T) {
	got, err := Encode(sample())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join("testdata", "sample.sbxstate")
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Fatalf("encoding changed (-update to accept):\ngot:\n%s\nwant:\n%s", got, want)
	}
	st, err := Decode(want)
	if err != nil {
		t.Fatalf("golden file does not decode: %v", err)
	}
	if len(st.Resources) != 4 || st.Serial != 7 {
		t.Fatalf("golden file: got %d resources serial %d, want 4 and 7", len(st.Resources), st.Serial)
	}
}
