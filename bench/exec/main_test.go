package bench

import (
	"os"
	"runtime/debug"
	"syscall"
	"testing"
)

// TestMain applies the GC setting of cmd/sysbox (sysbox.TuneGC: no proportional GC, a soft
// limit of an eighth of physical memory and at least 2 GiB, unless GOGC or GOMEMLIMIT is set),
// so that the figures are those of the CLI (`GOGC=100 go test …` measures with the default GC
// instead). It is repeated here rather than imported so that
// this benchmark does not depend on building every driver.
func TestMain(m *testing.M) {
	_, gogc := os.LookupEnv("GOGC")
	_, limit := os.LookupEnv("GOMEMLIMIT")
	if !gogc && !limit {
		lim := int64(2 << 30)
		var si syscall.Sysinfo_t
		if syscall.Sysinfo(&si) == nil {
			if m := int64(si.Totalram) * int64(si.Unit) / 8; m > lim {
				lim = m
			}
		}
		debug.SetMemoryLimit(lim)
		debug.SetGCPercent(-1)
	}
	os.Exit(m.Run())
}
