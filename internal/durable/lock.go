package durable

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrLocked is wrapped by the error Lock returns when another process holds the lock.
var ErrLocked = errors.New("lock is held by another process")

// LockedError says who holds a lock, as far as the holder recorded it.
type LockedError struct {
	Path   string
	Holder string // "pid 1234 (sysbox apply) since 2026-11-29T20:00:00Z", or "" when unknown
}

func (e *LockedError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("%s: %v", e.Path, ErrLocked)
	}
	return fmt.Sprintf("%s: %v: %s", e.Path, ErrLocked, e.Holder)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// FileLock is an exclusive flock held on a lock file.
type FileLock struct {
	f    *os.File
	path string
}

// Lock takes an exclusive, non-blocking flock on path (created if missing, never unlinked) and
// records the holder (pid, command, time) in it for the error a second process will see.
func Lock(path string) (*FileLock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := flockHeld(f); err != nil {
		holder := readHolder(f)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &LockedError{Path: path, Holder: holder}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	l := &FileLock{f: f, path: path}
	l.writeHolder()
	return l, nil
}

// deadHolderGrace bounds how long Lock waits for a lock whose recorded holder has died.
var deadHolderGrace = 10 * time.Second

// flockHeld takes the flock without blocking. When it is held but the process that recorded
// itself as holder no longer exists (SIGKILLed and reaped), the only other owner of that open
// file description is a child the holder forked and that has not yet reached exec, where the
// close-on-exec descriptor goes away: wait for that, briefly, instead of reporting a lock
// nobody really holds. A live holder, or one still holding after the grace, is EWOULDBLOCK.
func flockHeld(f *os.File) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if !errors.Is(err, unix.EWOULDBLOCK) || !holderDead(readHolder(f)) {
		return err
	}
	deadline := time.Now().Add(deadHolderGrace)
	for delay := 5 * time.Millisecond; time.Now().Before(deadline); {
		time.Sleep(delay)
		if err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); !errors.Is(err, unix.EWOULDBLOCK) {
			return err
		}
		if delay < 200*time.Millisecond {
			delay *= 2
		}
	}
	return err
}

// holderDead reports whether the holder record names a pid that no longer exists here. An
// unreadable or foreign record is not proof of death.
func holderDead(holder string) bool {
	pid, ok := HolderPID(holder)
	if !ok || pid == os.Getpid() {
		return false
	}
	return errors.Is(unix.Kill(pid, 0), unix.ESRCH)
}

// HolderPID returns the pid a holder record ("pid 1234 (cmd) since …") names.
func HolderPID(holder string) (int, bool) {
	rest, ok := strings.CutPrefix(holder, "pid ")
	if !ok {
		return 0, false
	}
	n, _, _ := strings.Cut(rest, " ")
	pid, err := strconv.Atoi(n)
	return pid, err == nil && pid > 0
}

// LockWait retries Lock until it succeeds, ctx ends (the last LockedError is returned), or
// another error occurs.
func LockWait(ctx context.Context, path string) (*FileLock, error) {
	delay := 10 * time.Millisecond
	for {
		l, err := Lock(path)
		if err == nil || !errors.Is(err, ErrLocked) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		if delay < 250*time.Millisecond {
			delay *= 2
		}
	}
}

// Path is the lock file's path.
func (l *FileLock) Path() string { return l.path }

// Unlock releases the lock. The file stays.
func (l *FileLock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := l.f.Close() // closing the descriptor releases the flock
	l.f = nil
	if err != nil {
		return fmt.Errorf("unlock %s: %w", l.path, err)
	}
	return nil
}

func (l *FileLock) writeHolder() {
	cmd := "?"
	if b, err := os.ReadFile("/proc/self/cmdline"); err == nil {
		cmd = strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		if len(cmd) > 200 {
			cmd = cmd[:200]
		}
	}
	info := "pid " + strconv.Itoa(os.Getpid()) + " (" + cmd + ") since " + time.Now().UTC().Format(time.RFC3339)
	if err := l.f.Truncate(0); err == nil {
		_, _ = l.f.WriteAt([]byte(info+"\n"), 0)
	}
}

// HolderOf returns what the holder of the lock at path recorded, or "" if nothing.
func HolderOf(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return readHolder(f)
}

func readHolder(f *os.File) string {
	buf := make([]byte, 512)
	n, _ := f.ReadAt(buf, 0)
	return strings.TrimSpace(string(buf[:n]))
}

// IsLocked reports whether some process holds the lock at path right now, without taking it
// for longer than the probe.
func IsLocked(path string) (bool, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	l, err := Lock(path)
	if errors.Is(err, ErrLocked) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, l.Unlock()
}
