package config_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/handlers"
)

// FuzzLoadEvaluate feeds one topology file through the whole decoder (HCL parse, block
// decoding, evaluation with the built-in schemas). No input may panic or hang; a rejected
// input must come with at least one error diagnostic, never a nil module without a reason.
// Seeds: every example topology and every diagnostics golden input.
func FuzzLoadEvaluate(f *testing.F) {
	config.AddFuzzSeeds(f)
	schemas := handlers.Builtin()
	f.Fuzz(func(t *testing.T, src []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), src, 0o600); err != nil {
			t.Fatal(err)
		}
		m, sources, diags := config.Load(dir)
		if m == nil {
			if !diags.HasErrors() {
				t.Fatalf("no module and no error diagnostic: %v", diags)
			}
			return
		}
		top, d := config.Evaluate(m, sources, config.Options{Schemas: schemas, ValidateOnly: true})
		if top == nil && !d.HasErrors() {
			t.Fatalf("no topology and no error diagnostic: %v", d)
		}
		// Releasing the bodies as they are decoded changes nothing a caller sees.
		m, sources, _ = config.Load(dir)
		again, d2 := config.Evaluate(m, sources, config.Options{Schemas: schemas, ValidateOnly: true, ReleaseBodies: true})
		if withoutSuggestion(d2.Error()) != withoutSuggestion(d.Error()) || (again == nil) != (top == nil) || top != nil && describeTopology(again) != describeTopology(top) {
			t.Fatalf("with ReleaseBodies: got %v, want %v", d2, d)
		}
	})
}

// suggestionRE is hcl's "did you mean" for an unknown name: hcl offers the first of the names
// close enough in the order it meets them in a map (functions, variables), so two evaluations
// of one input may suggest different ones. What is compared is the rest.
var suggestionRE = regexp.MustCompile(` Did you mean "[^"]*"\?`)

func withoutSuggestion(s string) string { return suggestionRE.ReplaceAllString(s, "") }
