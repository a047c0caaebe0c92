package upgrade

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// addSeeds adds every file matching the patterns under testdata/ to the fuzz corpus.
func addSeeds(f *testing.F, patterns ...string) [][]byte {
	var seeds [][]byte
	for _, pat := range patterns {
		files, _ := filepath.Glob(filepath.Join("testdata", pat))
		for _, p := range files {
			b, err := os.ReadFile(p)
			if err != nil {
				f.Fatal(err)
			}
			seeds = append(seeds, b)
			f.Add(b)
		}
	}
	if len(seeds) == 0 {
		f.Fatalf("no seeds for %v under testdata/", patterns)
	}
	return seeds
}

// FuzzParsePlan: the plan decoder never panics or hangs, and whatever it accepts has a
// canonical hash that is stable when the plan is parsed again.
func FuzzParsePlan(f *testing.F) {
	addSeeds(f, "plans/*.json", "seeds/plan-*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePlan("fuzz.json", data)
		if err != nil {
			return
		}
		q, err := ParsePlan("fuzz.json", p.Source)
		if err != nil || q.SHA256 != p.SHA256 {
			t.Fatalf("accepted plan does not re-parse to the same hash: %v", err)
		}
	})
}

// FuzzReadJournal: the journal reader never panics, and accepts nothing but (a prefix of) whole
// records it was seeded with: every record is checksummed, so a mutated line is never valid.
func FuzzReadJournal(f *testing.F) {
	seeds := addSeeds(f, "seeds/journal-*.log")
	valid := map[string]bool{}
	for _, s := range seeds {
		for _, line := range bytes.SplitAfter(s, []byte("\n")) {
			valid[string(line)] = true
		}
	}
	dir := f.TempDir() // one file, rewritten per input: a directory per input is slow
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, JournalFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
		evs, err := ReadJournal(dir)
		if err != nil {
			return
		}
		for _, line := range bytes.SplitAfter(data, []byte("\n")) {
			if len(line) > 0 && !valid[string(line)] {
				t.Fatalf("accepted a record it was never given: %q", line)
			}
		}
		replay(evs) // must not panic either
	})
}
