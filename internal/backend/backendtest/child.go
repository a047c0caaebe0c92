package backendtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/backend"
)

const (
	envRole     = "SYSBOX_BACKENDTEST_ROLE"
	envSettings = "SYSBOX_BACKENDTEST_SETTINGS"
	envArg      = "SYSBOX_BACKENDTEST_ARG"
)

// Main runs m, or — in a child process started by the suite — the child's role, then exits.
func Main(m *testing.M, open Opener) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(child(role, open))
	}
	os.Exit(m.Run())
}

// childProc is a running child process of the test binary.
type childProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

func startChild(t *testing.T, role string, settings map[string]string, arg string) *childProc {
	t.Helper()
	sj, _ := json.Marshal(settings)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envSettings+"="+string(sj), envArg+"="+arg)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childProc{cmd: cmd, stdin: stdin, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	return c
}

func (c *childProc) expect(t *testing.T, prefix string) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatalf("child %d exited before printing %q", c.cmd.Process.Pid, prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			t.Fatalf("child %d: got %q, want a line starting %q", c.cmd.Process.Pid, line, prefix)
		}
		return strings.TrimPrefix(line, prefix)
	case <-time.After(60 * time.Second):
		t.Fatalf("child %d: no %q line within 60s", c.cmd.Process.Pid, prefix)
	}
	return ""
}

// child runs one role in a child process and returns its exit code.
func child(role string, open Opener) int {
	var settings map[string]string
	if err := json.Unmarshal([]byte(os.Getenv(envSettings)), &settings); err != nil {
		fmt.Println("ERR settings:", err)
		return 2
	}
	b, err := open(settings)
	if err != nil {
		fmt.Println("ERR open:", err)
		return 2
	}
	defer b.Close()
	ctx := context.Background()
	switch role {
	case "hold":
		return childHold(ctx, b)
	case "cas":
		return childCAS(ctx, b)
	case "save-loop":
		return childSaveLoop(ctx, b)
	}
	fmt.Println("ERR unknown role", role)
	return 2
}

// childHold takes the lock, says LOCKED and holds it until stdin says "release" (or ends).
func childHold(ctx context.Context, b backend.Backend) int {
	l := b.(backend.Locker)
	id, err := l.Lock(ctx, backend.NewLockInfo("child-hold"))
	if err != nil {
		fmt.Println("ERR lock:", err)
		return 1
	}
	fmt.Println("LOCKED " + id)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() && sc.Text() != "release" {
	}
	if err := l.Unlock(ctx, id); err != nil {
		fmt.Println("ERR unlock:", err)
		return 1
	}
	fmt.Println("UNLOCKED")
	return 0
}

// childCAS, once stdin gives a line, adds the resources NAME[0..COUNT) (envArg "NAME:COUNT")
// by read-modify-save, retrying each on a conflict, and reports how many conflicts it met.
func childCAS(ctx context.Context, b backend.Backend) int {
	name, n, _ := strings.Cut(os.Getenv(envArg), ":")
	count, _ := strconv.Atoi(n)
	w := b.(backend.Writer)
	conflicts := 0
	fmt.Println("READY")
	bufio.NewScanner(os.Stdin).Scan()
	for i := 0; i < count; i++ {
		for {
			st, err := b.Read(ctx)
			if err != nil || st == nil {
				fmt.Println("ERR read:", err)
				return 1
			}
			st.Set(Resource(st.Lineage, fmt.Sprintf("sysbox_node.%s[%d]", name, i)))
			prev := st.Serial
			st.Serial++
			err = w.Save(ctx, st, prev)
			if errors.Is(err, backend.ErrConflict) {
				conflicts++
				continue
			}
			if err != nil {
				fmt.Println("ERR save:", err)
				return 1
			}
			break
		}
	}
	fmt.Printf("DONE conflicts=%d\n", conflicts)
	return 0
}

// childSaveLoop saves a changed state over and over until killed, saying SAVED after each.
func childSaveLoop(ctx context.Context, b backend.Backend) int {
	w := b.(backend.Writer)
	for {
		st, err := b.Read(ctx)
		if err != nil || st == nil {
			fmt.Println("ERR read:", err)
			return 1
		}
		st.Resources[st.Serial%uint64(len(st.Resources))].UpdatedAt = time.Now().UTC()
		prev := st.Serial
		st.Serial++
		if err := w.Save(ctx, st, prev); err != nil {
			fmt.Println("ERR save:", err)
			return 1
		}
		fmt.Printf("SAVED %d\n", st.Serial)
	}
}
