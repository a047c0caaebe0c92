package plan

import (
	"os"
	"testing"

	"zyvor.dev/sysbox/internal/cli/sysbox"
)

// TestMain applies the GC setting of cmd/sysbox (sysbox.TuneGC: no proportional GC, a 2 GiB
// soft limit, unless GOGC or GOMEMLIMIT is set), so that the figures are those of the CLI.
func TestMain(m *testing.M) {
	sysbox.TuneGC()
	os.Exit(m.Run())
}
