package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Stat is what the module reads of one /proc/PID/stat line.
type Stat struct {
	PID       int
	Comm      string // the command name, without its parentheses
	State     byte   // field 3: R, S, D, Z, T, …
	Session   int    // field 6: the session id
	UTime     uint64 // field 14: clock ticks spent in user mode
	STime     uint64 // field 15: clock ticks spent in kernel mode
	StartTime uint64 // field 22: clock ticks after boot
}

// ClockTicks is the unit of UTime, STime and StartTime: USER_HZ, 100 ticks per second on
// every Linux architecture (the kernel's ABI, whatever its internal HZ).
const ClockTicks = 100

// Exited reports whether the process has ended (a zombie not yet reaped, or dead).
func (s Stat) Exited() bool { return s.State == 'Z' || s.State == 'X' }

// ParseStat parses one /proc/PID/stat line. Fields are counted from 1 as in proc(5).
func ParseStat(b []byte) (Stat, error) {
	open := bytes.IndexByte(b, '(')
	// The name may itself hold ')': the last one closes it, and nothing after it can be a ')'
	// of the name (no later field holds one).
	closing := bytes.LastIndexByte(b, ')')
	if open < 0 || closing < open {
		return Stat{}, fmt.Errorf("no parenthesised command name in %q", trim(b))
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Stat{}, fmt.Errorf("field 1 (pid) %q: not a number", trim(b[:open]))
	}
	f := bytes.Fields(b[closing+1:]) // f[0] is field 3
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("%d fields after the command name, want at least 20", len(f))
	}
	if len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("field 3 (state) %q: not one letter", f[0])
	}
	sid, err := strconv.Atoi(string(f[3]))
	if err != nil {
		return Stat{}, fmt.Errorf("field 6 (session) %q: not a number", f[3])
	}
	utime, err := strconv.ParseUint(string(f[11]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("field 14 (utime) %q: not a number", f[11])
	}
	stime, err := strconv.ParseUint(string(f[12]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("field 15 (stime) %q: not a number", f[12])
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return Stat{}, fmt.Errorf("field 22 (start time) %q: not a number", f[19])
	}
	return Stat{PID: pid, Comm: string(b[open+1 : closing]), State: f[0][0], Session: sid, UTime: utime, STime: stime, StartTime: start}, nil
}

// ReadStat reads /proc/PID/stat. A missing pid's error wraps os.ErrNotExist.
func ReadStat(pid int) (Stat, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	b, err := os.ReadFile(path)
	if err != nil {
		return Stat{}, err // *PathError naming the file
	}
	s, err := ParseStat(b)
	if err != nil {
		return Stat{}, fmt.Errorf("%s: %w", path, err)
	}
	if s.PID != pid {
		return Stat{}, fmt.Errorf("%s: names pid %d", path, s.PID)
	}
	return s, nil
}

// ErrExited is returned for a process that has ended but is not yet reaped. It wraps
// os.ErrNotExist: to a caller that checks a recorded process it is as gone as a missing pid.
var ErrExited = fmt.Errorf("process has exited: %w", os.ErrNotExist)

// StartTime is field 22 of /proc/PID/stat of a live process: with the pid it names one
// process, also after the pid is reused. A missing or exited process is an error wrapping
// os.ErrNotExist.
func StartTime(pid int) (uint64, error) {
	s, err := ReadStat(pid)
	if err != nil {
		return 0, err
	}
	if s.Exited() {
		return 0, fmt.Errorf("/proc/%d/stat: state %c: %w", pid, s.State, ErrExited)
	}
	return s.StartTime, nil
}

// Alive reports whether pid is still the process that started at start (clock ticks after
// boot) and has not exited.
func Alive(pid int, start uint64) bool {
	if pid <= 0 {
		return false
	}
	st, err := StartTime(pid)
	return err == nil && st == start
}

// trim shortens b for an error message.
func trim(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
