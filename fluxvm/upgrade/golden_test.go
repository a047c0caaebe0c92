package upgrade

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

// TestValidateGolden keeps the full validate report of each testdata/plans/*.json in a .golden
// file (go test -run TestValidateGolden -update to rewrite after a deliberate change).
func TestValidateGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/plans/*.json")
	if len(files) == 0 {
		t.Fatal("no testdata/plans/*.json")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := LoadPlan(f)
			got := "valid\n"
			if err != nil {
				got = err.Error() + "\n"
			}
			golden := strings.TrimSuffix(f, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if got != string(want) {
				t.Errorf("validate %s:\ngot:\n%s\nwant:\n%s", f, got, want)
			}
		})
	}
}
