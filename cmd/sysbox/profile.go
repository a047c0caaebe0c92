package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
)

// startProfiles writes a CPU profile to $SYSBOX_CPUPROFILE and an allocation profile to
// $SYSBOX_MEMPROFILE when they are set, so that the CLI path itself can be profiled
// (bench/plan/cli.sh, bench/netns/lab.sh). The returned func ends them; it is a no-op when
// neither is set.
func startProfiles() (stop func()) {
	cpu, mem := os.Getenv("SYSBOX_CPUPROFILE"), os.Getenv("SYSBOX_MEMPROFILE")
	var cf *os.File
	if cpu != "" {
		f, err := os.Create(cpu)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "sysbox: SYSBOX_CPUPROFILE %s: %v\n", cpu, err)
		} else {
			cf = f
		}
	}
	return func() {
		if cf != nil {
			pprof.StopCPUProfile()
			_ = cf.Close()
		}
		if mem != "" {
			runtime.GC()
			f, err := os.Create(mem)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "sysbox: SYSBOX_MEMPROFILE %s: %v\n", mem, err)
			}
		}
	}
}
