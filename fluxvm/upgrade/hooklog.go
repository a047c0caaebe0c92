package upgrade

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"zyvor.dev/sysbox/internal/durable"
)

// maxLogLine bounds one logged line; a longer run of bytes without a newline is split.
const maxLogLine = 4096

// hookLog streams a hook's stdout and stderr into its log file while the hook runs, one
// timestamped line at a time, so that a hook cut off by SIGKILL of the manager (or a power loss
// after the last sync) still leaves what it printed. Output past max bytes is dropped with one
// marker line. sync is called at the hook's end, before its outcome is journaled.
type hookLog struct {
	mu        sync.Mutex
	f         *os.File
	path      string
	now       func() time.Time
	written   int64
	max       int64
	partial   map[string][]byte
	truncated bool
	err       error
}

// createHookLog creates (or truncates) path and makes its directory entry durable, so the file
// is there after a crash even if the hook prints nothing.
func createHookLog(path string, max int64, now func() time.Time, header string) (*hookLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hook log: %w", err)
	}
	l := &hookLog{f: f, path: path, now: now, max: max, partial: map[string][]byte{}}
	l.raw(header)
	if err := f.Sync(); err != nil {
		f.Close()
		return nil, fmt.Errorf("hook log %s: fsync: %w", path, err)
	}
	if err := durable.SyncDir(filepath.Dir(path)); err != nil {
		f.Close()
		return nil, fmt.Errorf("hook log %s: %w", path, err)
	}
	return l, nil
}

func (l *hookLog) raw(s string) {
	if l.err != nil {
		return
	}
	if _, err := l.f.WriteString(s); err != nil {
		l.err = fmt.Errorf("hook log %s: %w", l.path, err)
	}
}

// line writes one timestamped line, unless the bound is reached.
func (l *hookLog) line(stream string, b []byte, suffix string) {
	if l.truncated {
		return
	}
	s := fmt.Sprintf("%s %s| %s%s\n", l.now().UTC().Format("2006-01-02T15:04:05.000000Z07:00"), stream, b, suffix)
	if l.written+int64(len(s)) > l.max {
		l.truncated = true
		l.raw(fmt.Sprintf("# output truncated at %d bytes; the rest was dropped\n", l.written))
		return
	}
	l.written += int64(len(s))
	l.raw(s)
}

func (l *hookLog) write(stream string, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf := append(l.partial[stream], p...)
	for {
		i := bytes.IndexByte(buf, '\n')
		if i < 0 && len(buf) < maxLogLine {
			break
		}
		if i < 0 || i > maxLogLine {
			l.line(stream, buf[:maxLogLine], " [line split]")
			buf = buf[maxLogLine:]
			continue
		}
		l.line(stream, buf[:i], "")
		buf = buf[i+1:]
	}
	l.partial[stream] = append([]byte(nil), buf...)
}

// stream is the writer for one of the hook's output streams ("stdout", "stderr"). It never
// fails the hook: a write error is kept and returned by finish.
func (l *hookLog) stream(name string) io.Writer { return streamWriter{l, name} }

type streamWriter struct {
	l    *hookLog
	name string
}

func (w streamWriter) Write(p []byte) (int, error) {
	w.l.write(w.name, p)
	return len(p), nil
}

// finish writes any unterminated last lines and the footer, fsyncs and closes the log.
func (l *hookLog) finish(footer string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range []string{"stdout", "stderr"} {
		if len(l.partial[s]) > 0 {
			l.line(s, l.partial[s], " [no newline at end]")
			l.partial[s] = nil
		}
	}
	l.raw(footer)
	if err := l.f.Sync(); err != nil && l.err == nil {
		l.err = fmt.Errorf("hook log %s: fsync: %w", l.path, err)
	}
	if err := l.f.Close(); err != nil && l.err == nil {
		l.err = fmt.Errorf("hook log %s: %w", l.path, err)
	}
	return l.err
}
