package plan

import (
	"os"
	"testing"

	"zyvor.dev/sysbox/internal/gctune"
)

// TestMain applies the GC setting of cmd/sysbox (gctune.CLI: no proportional GC, a soft
// limit of an eighth of physical memory and at least 2 GiB, unless GOGC or GOMEMLIMIT is set),
// so that the figures are those of the CLI. It is imported from
// internal/gctune rather than the CLI so that this benchmark does not depend on building every driver.
func TestMain(m *testing.M) {
	gctune.CLI()
	os.Exit(m.Run())
}
