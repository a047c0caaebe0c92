package testenv

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proc is a running process whose combined output is collected line by line.
type Proc struct {
	Cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	line chan string
}

// Start runs bin with args and the environment plus env. The process is killed when the test
// ends; its output is logged then if the test failed.
func Start(t testing.TB, env []string, bin string, args ...string) *Proc {
	t.Helper()
	c := exec.Command(bin, args...)
	c.Env = append(os.Environ(), env...)
	r, w := io.Pipe()
	c.Stdout, c.Stderr = w, w
	p := &Proc{Cmd: c, line: make(chan string, 1000)}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			select {
			case p.line <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
		w.Close()
		if t.Failed() {
			t.Logf("%s %v output:\n%s", bin, args, p.Output())
		}
	})
	return p
}

// Output is everything the process wrote so far.
func (p *Proc) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// WaitLine waits up to within for a line starting with prefix and returns it.
func (p *Proc) WaitLine(t testing.TB, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l := <-p.line:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-deadline:
			t.Fatalf("no line starting %q within %v:\n%s", prefix, within, p.Output())
		}
	}
}
