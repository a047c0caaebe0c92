package procfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// line is a /proc/PID/stat line of pid 4242 named comm, state st, session 17, start time 987654.
func line(comm, st string) string {
	return "4242 (" + comm + ") " + st + " 1 4242 17 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 " +
		"18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"
}

func TestParseStat(t *testing.T) {
	for _, comm := range []string{"sleep", "a b", "a) b (c", "))((", ") 9 9 9", ""} {
		t.Run(comm, func(t *testing.T) {
			got, err := ParseStat([]byte(line(comm, "S")))
			if err != nil {
				t.Fatal(err)
			}
			want := Stat{PID: 4242, Comm: comm, State: 'S', Session: 17, UTime: 1, STime: 2, StartTime: 987654}
			if got != want {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

func TestParseStatRefuses(t *testing.T) {
	full := line("x", "S")
	for name, in := range map[string]string{
		"empty":                "",
		"no name":              "4242 S 1 2 3",
		"no closing paren":     "4242 (x S 1",
		"pid not a number":     strings.Replace(full, "4242 ", "x42 ", 1),
		"short":                full[:strings.Index(full, " 987654")],
		"state two letters":    strings.Replace(full, ") S ", ") SS ", 1),
		"session not a number": strings.Replace(full, " 4242 17 ", " 4242 x ", 1),
		"start not a number":   strings.Replace(full, " 987654 ", " 98765x ", 1),
		"utime not a number":   strings.Replace(full, " 0 1 2 0 0 20 ", " 0 x 2 0 0 20 ", 1),
		"stime not a number":   strings.Replace(full, " 0 1 2 0 0 20 ", " 0 1 x 0 0 20 ", 1),
	} {
		t.Run(name, func(t *testing.T) {
			if s, err := ParseStat([]byte(in)); err == nil {
				t.Errorf("ParseStat(%q) = %+v, want an error", in, s)
			}
		})
	}
}

// TestStartTimeOfARealProcess runs sleep under a name with spaces and parentheses (the kernel
// takes the command name from the executed path's base name) and reads it back.
func TestStartTimeOfARealProcess(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(t.TempDir(), "a) b (c 1 2 3 4 5") // the kernel keeps 15 bytes of it
	if err := os.Symlink(sleep, name); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	pid := cmd.Process.Pid
	s, err := ReadStat(pid)
	if err != nil {
		t.Fatal(err)
	}
	if want := "a) b (c 1 2 3 4"; s.Comm != want || s.PID != pid {
		t.Errorf("got pid %d comm %q, want %d %q", s.PID, s.Comm, pid, want)
	}
	if sid, _ := unix.Getsid(0); s.Session != sid { // the child keeps the test's session
		t.Errorf("session %d, want %d", s.Session, sid)
	}
	start, err := StartTime(pid)
	if err != nil || start != s.StartTime || start == 0 {
		t.Fatalf("StartTime = %d, %v; want %d", start, err, s.StartTime)
	}
	if !Alive(pid, start) || Alive(pid, start+1) || Alive(0, start) {
		t.Errorf("Alive: want true only for pid %d with start %d", pid, start)
	}
	self, err := StartTime(os.Getpid())
	if err != nil || self > start {
		t.Errorf("own start time %d, %v: want one no later than the child's %d", self, err, start)
	}

	// Killed but not reaped: a zombie, reported as gone.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s, err := ReadStat(pid)
		if err != nil {
			t.Fatal(err) // not reaped yet: the entry must still be there
		}
		if s.Exited() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still in state %c 30 s after SIGKILL", pid, s.State)
		}
	}
	if _, err := StartTime(pid); !errors.Is(err, os.ErrNotExist) || !errors.Is(err, ErrExited) {
		t.Errorf("StartTime of a zombie: %v, want ErrExited wrapping os.ErrNotExist", err)
	}
	if Alive(pid, start) {
		t.Error("Alive of a zombie: true")
	}
	_ = cmd.Wait()
	reaped = true
}

func TestStartTimeOfAMissingPid(t *testing.T) {
	if _, err := StartTime(-1); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("StartTime(-1): %v, want os.ErrNotExist", err)
	}
}
