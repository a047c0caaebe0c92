package exec

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// EnvFailpoint names the environment variable that makes the executor kill its own process
// with SIGKILL at a chosen point, for crash tests: "checkpoint@N" kills right after the Nth
// checkpoint record (the run header counts as the first) is durable; "state@N" right after the
// Nth state save. Several points are separated by commas. It is inert when unset.
const EnvFailpoint = "SYSBOX_EXEC_FAILPOINT"

type failpoint struct {
	mu    sync.Mutex
	want  map[string]int
	count map[string]int
}

var (
	envFailpointOnce sync.Once
	envFailpoint     *failpoint
)

// failpointFromEnv returns the process-wide failpoint (nil when unset): one counter per point
// across every log and state save of the process.
func failpointFromEnv() *failpoint {
	envFailpointOnce.Do(func() {
		spec := os.Getenv(EnvFailpoint)
		if spec == "" {
			return
		}
		fp := &failpoint{want: map[string]int{}, count: map[string]int{}}
		for _, p := range strings.Split(spec, ",") {
			name, n, ok := strings.Cut(strings.TrimSpace(p), "@")
			if k, err := strconv.Atoi(n); ok && err == nil && k > 0 {
				fp.want[name] = k
			}
		}
		envFailpoint = fp
	})
	return envFailpoint
}

func (f *failpoint) hit(name string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.count[name]++
	kill := f.want[name] != 0 && f.count[name] == f.want[name]
	f.mu.Unlock()
	if kill {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never continue past the failpoint
	}
}
