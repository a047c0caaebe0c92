// Package failpoint kills the process with SIGKILL at a named point of a run, for crash tests,
// or (EnvAction=stop) stops it there with SIGSTOP until it is continued, for fault tests that
// change the file system at an exact point.
// A Set is parsed from "point@N[,point@N…]": the process dies right after the Nth hit of that
// point. Names must be ones the caller declares, so a misspelled point is an error instead of a
// crash test that never crashes. A trace file, when set, receives one line per hit, so that a
// test can count the points of a clean run before killing it at each of them.
//
// The executor knows nothing of this package: it calls a hook after each durable step, and
// only test builds (build tag sysboxtest) or tests install a Set as that hook.
package failpoint

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// EnvSpec and EnvTrace name the environment variables test builds read (see FromEnv).
const (
	EnvSpec   = "SYSBOX_EXEC_FAILPOINT"
	EnvTrace  = "SYSBOX_EXEC_FAILPOINT_TRACE"
	EnvAction = "SYSBOX_EXEC_FAILPOINT_ACTION" // "kill" (default) or "stop"
)

// Set is a parsed failpoint specification; its Hit method is safe for concurrent use.
type Set struct {
	known []string
	mu    sync.Mutex
	want  map[string]int
	count map[string]int
	trace *os.File
	stop  bool // SIGSTOP and carry on when continued, instead of SIGKILL
}

// Parse parses spec ("" is a Set that never kills). Every name must be in known.
func Parse(spec string, known []string) (*Set, error) {
	s := &Set{known: known, want: map[string]int{}, count: map[string]int{}}
	for _, p := range strings.Split(spec, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		name, n, ok := strings.Cut(p, "@")
		k, err := strconv.Atoi(n)
		if !ok || err != nil || k < 1 {
			return nil, fmt.Errorf("failpoint %q: want POINT@N with N ≥ 1", p)
		}
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("failpoint %q: unknown point %q (known: %s)", p, name, strings.Join(known, ", "))
		}
		if _, dup := s.want[name]; dup {
			return nil, fmt.Errorf("failpoint %q: point %s given twice", p, name)
		}
		s.want[name] = k
	}
	return s, nil
}

// FromEnv parses EnvSpec and opens EnvTrace (appending) as lookup reports them; nil when
// neither is set.
func FromEnv(lookup func(string) (string, bool), known []string) (*Set, error) {
	spec, _ := lookup(EnvSpec)
	trace, _ := lookup(EnvTrace)
	if spec == "" && trace == "" {
		return nil, nil
	}
	s, err := Parse(spec, known)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvSpec, err)
	}
	switch action, _ := lookup(EnvAction); action {
	case "", "kill":
	case "stop":
		s.stop = true
	default:
		return nil, fmt.Errorf("%s: unknown action %q (want kill or stop)", EnvAction, action)
	}
	if trace != "" {
		if s.trace, err = os.OpenFile(trace, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvTrace, err)
		}
	}
	return s, nil
}

// Hit counts one pass through point name and kills the process when it is the wanted one.
// An undeclared name is a programming error and panics.
func (s *Set) Hit(name string) {
	if s == nil {
		return
	}
	if !slices.Contains(s.known, name) {
		panic(fmt.Sprintf("failpoint: undeclared point %q", name))
	}
	s.mu.Lock()
	s.count[name]++
	if s.want[name] != 0 && s.count[name] == s.want[name] && s.stop {
		stopHere()
	} else if s.want[name] != 0 && s.count[name] == s.want[name] {
		// The lock is never released: while the signal is delivered no other goroutine passes
		// (or traces) a point, so a killed run's trace holds exactly the points before this one.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	if s.trace != nil {
		// The line is in the page cache once write returns: it outlives the process.
		_, _ = s.trace.WriteString(name + "\n")
	}
	s.mu.Unlock()
}

// stopHere stops the process and returns once it is continued. The stop signal may be taken by
// another thread while this one runs on until the group stop reaches it: waiting for SIGCONT
// keeps the caller exactly at the point.
func stopHere() {
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)
	defer signal.Stop(cont)
	_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	<-cont
}

// Count reads a trace file: how many times each point was hit.
func Count(path string) (map[string]int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failpoint trace: %w", err)
	}
	n := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			n[l]++
		}
	}
	return n, nil
}
