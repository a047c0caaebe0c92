package netns

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// mainThreadEnv turns the test binary into a child that runs one scenario from the main thread
// (TestMain, mainThreadChild); its value is "SCENARIO" or "SCENARIO:TOPOLOGY".
const mainThreadEnv = "SYSBOX_NETNS_TEST_MAIN_THREAD"

func init() {
	if os.Getenv(mainThreadEnv) != "" {
		// The main goroutine stays on the main thread until the scenario lets go of it.
		runtime.LockOSThread()
	}
}

func TestMain(m *testing.M) {
	if v := os.Getenv(mainThreadEnv); v != "" {
		if err := mainThreadChild(v); err != nil {
			fmt.Fprintln(os.Stderr, "main-thread child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMainThreadChild runs scenario in a child process (mainThreadChild) and fails t with its
// output if the child reports a failure.
func runMainThreadChild(t *testing.T, scenario string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), mainThreadEnv+"="+scenario)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child %s: %v\n%s", scenario, err, out)
	}
}

// mainThreadChild runs in a fresh process, on the main goroutine locked to the main thread.
// It sets up what the scenario needs, then, with a single P, unlocks the main thread and makes
// one call: the first goroutine the call starts runs on the main thread (the only P is the
// main thread's, and the new goroutine is next in line when the main goroutine blocks).
// Afterwards every thread of the process must be back in the namespaces the main thread
// started in.
func mainThreadChild(v string) error {
	scenario, topology, _ := strings.Cut(v, ":")
	host, err := threadNamespaces("self")
	if err != nil {
		return err
	}
	var call func() error
	switch scenario {
	case "onthread":
		call = onThreadScenario
	case "exec", "start":
		f, cleanup, err := nodeScenario(scenario, topology)
		defer cleanup()
		if err != nil {
			return err
		}
		call = f
	default:
		return fmt.Errorf("unknown scenario %q", scenario)
	}
	prev := runtime.GOMAXPROCS(1)
	if unix.Gettid() != unix.Getpid() {
		return errors.New("setup: the main goroutine is not on the main thread")
	}
	runtime.UnlockOSThread()
	err = call()
	runtime.GOMAXPROCS(prev)
	if err != nil {
		return err
	}
	// A thread left in other namespaces ends with its goroutine: give it time to be gone.
	deadline := time.Now().Add(30 * time.Second)
	for {
		stray, err := strayThreads(host)
		if err != nil {
			return err
		}
		if len(stray) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("threads outside the host's namespaces 30 s after the call (pid %d): %s", os.Getpid(), strings.Join(stray, "; "))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// onThreadScenario checks the setup (a plain goroutine started now runs on the main thread),
// then that onThread runs its function elsewhere, and that a thread fn did not restore ends.
func onThreadScenario() error {
	tids := make(chan int, 1)
	go func() {
		runtime.LockOSThread()
		tids <- unix.Gettid()
		runtime.UnlockOSThread()
	}()
	if tid := <-tids; tid != unix.Getpid() {
		return fmt.Errorf("setup: a new goroutine ran on thread %d, not on the main thread %d", tid, unix.Getpid())
	}
	var tid int
	if err := onThread(func() (bool, error) { tid = unix.Gettid(); return false, nil }); err != nil {
		return err
	}
	if tid == unix.Getpid() {
		return fmt.Errorf("onThread ran fn on the main thread %d", tid)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat("/proc/self/task/" + strconv.Itoa(tid)); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("thread %d, not restored by fn, still runs 30 s later", tid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nodeScenario creates a node of topology with a hostname and a hosts file (so that entering
// it switches network, UTS and mount namespace) and returns the call: one Exec or StartNode.
func nodeScenario(scenario, topology string) (call func() error, cleanup func(), err error) {
	ctx := context.Background()
	d := New()
	cleanup = func() { ScrubTopology(ctx, d, topology) }
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return nil, cleanup, err
	}
	o := substrate.Owner{Topology: topology, Address: "sysbox_node.main_thread", Type: "sysbox_node", Generation: 1}
	spec := substrate.NodeSpec{Owner: o, Driver: Name, Hostname: "inside", Command: []string{bb, "sleep", "3600"}}
	h, err := d.CreateNode(ctx, spec)
	if err != nil {
		return nil, cleanup, err
	}
	if err := d.SetHosts(ctx, h, o, []driver.HostEntry{{Address: "198.51.100.7", Names: []string{"seven"}}}); err != nil {
		return nil, cleanup, err
	}
	if scenario == "start" {
		return func() error { return d.StartNode(ctx, h, spec) }, cleanup, nil
	}
	return func() error {
		res, err := d.Exec(ctx, h, substrate.ExecRequest{Argv: []string{bb, "hostname"}, Timeout: 20 * time.Second})
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(res.Stdout)); got != "inside" {
			return fmt.Errorf("hostname inside the node: got %q (exit %d, %s), want %q", got, res.ExitCode, res.Stderr, "inside")
		}
		return nil
	}, cleanup, nil
}

var nsKinds = []string{"net", "uts", "mnt"}

// threadNamespaces reads the namespace inodes of a thread of this process ("self": the main
// thread, or a thread id).
func threadNamespaces(task string) ([]uint64, error) {
	dir := "/proc/self/task/" + task + "/ns/"
	if task == "self" {
		dir = "/proc/thread-self/ns/"
	}
	var out []uint64
	for _, k := range nsKinds {
		ino, err := nsInode(dir + k)
		if err != nil {
			return nil, err
		}
		out = append(out, ino)
	}
	return out, nil
}

// strayThreads lists this process's threads whose namespaces are not host's.
func strayThreads(host []uint64) ([]string, error) {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	var stray []string
	for _, e := range ents {
		got, err := threadNamespaces(e.Name())
		if err != nil {
			continue // exited meanwhile
		}
		for i, k := range nsKinds {
			if got[i] != host[i] {
				what := "thread " + e.Name()
				if e.Name() == strconv.Itoa(os.Getpid()) {
					what = "main thread " + e.Name()
				}
				stray = append(stray, fmt.Sprintf("%s in %s namespace %d (host's: %d)", what, k, got[i], host[i]))
			}
		}
	}
	return stray, nil
}

// TestOnThreadAvoidsTheMainThread: even when the goroutine onThread starts is scheduled on the
// main thread, fn runs on another thread, and a thread fn does not restore ends.
func TestOnThreadAvoidsTheMainThread(t *testing.T) {
	runMainThreadChild(t, "onthread")
}

// TestKernelEnterNeverParksTheMainThread (kernel tier): entering a node that has a hostname
// and a hosts file (Exec, StartNode) from a goroutine the scheduler put on the main thread
// leaves every thread of the process in the host's network, UTS and mount namespaces. Before
// onThread, enter left that thread locked in the node's private mount namespace, and the
// runtime, which cannot end the main thread, parked it there for the rest of the process.
func TestKernelEnterNeverParksTheMainThread(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireBinary(t, "busybox")
	for _, scenario := range []string{"exec", "start"} {
		t.Run(scenario, func(t *testing.T) {
			b := make([]byte, 6)
			_, _ = rand.Read(b)
			topology := "test-" + hex.EncodeToString(b)
			// The child scrubs too; this covers a child that died first.
			t.Cleanup(func() { ScrubTopology(context.Background(), New(), topology) })
			runMainThreadChild(t, scenario+":"+topology)
		})
	}
}
