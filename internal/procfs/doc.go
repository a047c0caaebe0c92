// Package procfs reads the fields of /proc/PID/stat that sysbox uses to name a process: its
// state, session, CPU times and start time. It is the module's one parser of that file
// (internal/archtest fails on a /proc/PID/stat path anywhere else). A pid alone is reused by
// the kernel; a pid together with its start time (clock ticks after boot, field 22) names one
// process for as long as the machine runs, which is how drivers and the CLI recognise a
// process they recorded.
//
// Invariants:
//   - The command name (field 2) may hold spaces and parentheses, and it is at most 16 bytes
//     as the kernel stores it; the fields after it start after the LAST ')' of the line.
//   - A process that has exited but is not yet reaped (state Z or X) is reported as gone: its
//     read fails with an error that wraps os.ErrNotExist, like a pid that no longer exists.
//   - The package is a foundation: it imports nothing else of the module (internal/archtest).
package procfs
