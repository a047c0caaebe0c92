package plan

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestMain applies the GC setting cmd/sysbox uses (GOGC=400 unless GOGC is set), so that the
// figures are those of the CLI.
func TestMain(m *testing.M) {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(400)
	}
	os.Exit(m.Run())
}
