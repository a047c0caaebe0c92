package argv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultMaxOutput bounds each captured stream when Cmd.MaxOutput is zero.
const DefaultMaxOutput = 1 << 20

// Cmd is one program invocation.
type Cmd struct {
	Argv      []string      // Argv[0] is the program (looked up in PATH if it has no slash)
	Env       []string      // full environment; nil means none beyond what the caller adds
	Dir       string        // working directory; "" means the caller's
	Timeout   time.Duration // 0 means only ctx bounds it
	Stdin     io.Reader     // nil means /dev/null
	Stdout    io.Writer     // optional tee of stdout (unbounded: the writer decides)
	Stderr    io.Writer     // optional tee of stderr
	MaxOutput int64         // bound on each captured stream; 0 means DefaultMaxOutput
}

// Result is what a finished program left.
type Result struct {
	ExitCode  int // -1 when killed by a signal or timed out
	Stdout    []byte
	Stderr    []byte
	Truncated bool // a captured stream hit MaxOutput
	TimedOut  bool
	Duration  time.Duration
}

// ErrTimeout is wrapped by Run's error when the timeout killed the program.
var ErrTimeout = errors.New("timed out")

// ExitError is returned when the program ran and exited non-zero (or by a signal).
type ExitError struct {
	Argv   []string
	Result Result
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s: exit code %d", Quote(e.Argv), e.Result.ExitCode)
	if s := strings.TrimSpace(string(tail(e.Result.Stderr, 300))); s != "" {
		msg += ": " + s
	}
	return msg
}

// Runner runs commands. Exec is the real one; Fake a scripted one.
type Runner interface {
	Run(ctx context.Context, cmd Cmd) (Result, error)
}

// Exec runs commands on the host.
type Exec struct{}

var _ Runner = Exec{}

// Run starts cmd.Argv[0] directly with cmd.Argv[1:] as arguments. It returns a nil error only on
// exit code 0; a non-zero exit is an *ExitError, a timeout wraps ErrTimeout. The Result is filled
// in either case.
func (Exec) Run(ctx context.Context, cmd Cmd) (Result, error) {
	if len(cmd.Argv) == 0 || cmd.Argv[0] == "" {
		return Result{ExitCode: -1}, errors.New("run: empty argv")
	}
	if cmd.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cmd.Timeout)
		defer cancel()
	}
	max := cmd.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	c := exec.Command(cmd.Argv[0], cmd.Argv[1:]...)
	c.Env = cmd.Env
	if c.Env == nil {
		c.Env = []string{}
	}
	c.Dir = cmd.Dir
	c.Stdin = cmd.Stdin
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout := &boundedBuffer{max: max}
	stderr := &boundedBuffer{max: max}
	c.Stdout = tee(stdout, cmd.Stdout)
	c.Stderr = tee(stderr, cmd.Stderr)
	c.WaitDelay = 2 * time.Second

	start := time.Now()
	if err := c.Start(); err != nil {
		return Result{ExitCode: -1, Duration: time.Since(start)}, fmt.Errorf("run %s: %w", Quote(cmd.Argv), err)
	}
	done := make(chan struct{})
	watcherDone := make(chan struct{})
	var timedOut bool
	go func() {
		defer close(watcherDone)
		select {
		case <-ctx.Done():
			timedOut = true
			// Kill the whole group: a hook's children must not outlive its timeout.
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		case <-done:
		}
	}()
	waitErr := c.Wait()
	close(done)
	<-watcherDone // timedOut is written by the watcher: wait for it before reading (race detector)
	res := Result{
		ExitCode:  c.ProcessState.ExitCode(),
		Stdout:    stdout.Bytes(),
		Stderr:    stderr.Bytes(),
		Truncated: stdout.truncated || stderr.truncated,
		Duration:  time.Since(start),
	}
	if timedOut && waitErr != nil {
		res.TimedOut = true
		res.ExitCode = -1
		return res, fmt.Errorf("run %s: %w after %s", Quote(cmd.Argv), ErrTimeout, res.Duration.Round(time.Millisecond))
	}
	if waitErr != nil {
		var ee *exec.ExitError
		if errors.As(waitErr, &ee) {
			return res, &ExitError{Argv: cmd.Argv, Result: res}
		}
		return res, fmt.Errorf("run %s: %w", Quote(cmd.Argv), waitErr)
	}
	return res, nil
}

func tee(buf io.Writer, extra io.Writer) io.Writer {
	if extra == nil {
		return buf
	}
	return io.MultiWriter(buf, extra)
}

// boundedBuffer keeps the first max bytes and notes that more came.
type boundedBuffer struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	max       int64
	truncated bool
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - int64(b.buf.Len())
	if room <= 0 {
		b.truncated = b.truncated || len(p) > 0
		return len(p), nil
	}
	if int64(len(p)) > room {
		b.buf.Write(p[:room])
		b.truncated = true
		return len(p), nil
	}
	return b.buf.Write(p)
}

func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// Quote renders an argv for messages, JSON-quoting arguments that need it.
func Quote(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n\"'\\$`") {
			parts[i] = fmt.Sprintf("%q", a)
		} else {
			parts[i] = a
		}
	}
	return strings.Join(parts, " ")
}
