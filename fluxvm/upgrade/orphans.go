package upgrade

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/procfs"
)

// HookProcess is a live process that carries a transaction's hook environment.
type HookProcess struct {
	PID       int
	Component string
	Step      string
	Cmdline   string
}

// liveHooks finds processes (hooks and their children) started for this transaction by an
// earlier, now dead, fluxvm-upgrade process: the flock died with that process, but its hooks run
// on in their own process group. Resuming or rolling back beside them would race them, so such a
// transaction counts as locked. Processes this user cannot read are not seen.
func liveHooks(txDir string) []HookProcess {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	want := []byte("FLUXVM_TRANSACTION_DIR=" + txDir + "\x00")
	var out []HookProcess
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(append(env, 0), want) {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.Exited() {
			continue // a zombie has already finished; its parent just has not reaped it
		}
		hp := HookProcess{PID: pid}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("FLUXVM_COMPONENT=")); ok {
				hp.Component = string(v)
			}
			if v, ok := bytes.CutPrefix(kv, []byte("FLUXVM_STEP=")); ok {
				hp.Step = string(v)
			}
		}
		if cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil {
			hp.Cmdline = strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
		}
		out = append(out, hp)
	}
	return out
}

// HookStillRunningError says a previous run's hook is alive; it wraps durable.ErrLocked.
type HookStillRunningError struct {
	TransactionID string
	Procs         []HookProcess
}

func (e *HookStillRunningError) Error() string {
	var parts []string
	for _, p := range e.Procs {
		parts = append(parts, fmt.Sprintf("pid %d (component %s, step %s: %s)", p.PID, p.Component, p.Step, p.Cmdline))
	}
	return fmt.Sprintf("transaction %s: %v: hook processes of an earlier run are still running: %s; wait for them or stop them first",
		e.TransactionID, durable.ErrLocked, strings.Join(parts, "; "))
}

func (e *HookStillRunningError) Unwrap() error { return durable.ErrLocked }
