package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/testenv"
)

// fakeScans is a scan function whose scans the test starts and finishes by hand: scan n returns
// {1: [n]}, so a caller's answer names the scan it got.
type fakeScans struct {
	started chan int // receives n when scan n begins
	finish  chan struct{}
	mu      sync.Mutex
	n       int
}

func (f *fakeScans) scan() map[uint64][]int {
	f.mu.Lock()
	f.n++
	n := f.n
	f.mu.Unlock()
	f.started <- n
	<-f.finish
	return map[uint64][]int{1: {n}}
}

// waitAsked blocks until want callers have entered pidsIn (a condition, not a duration).
func waitAsked(t *testing.T, s *procScanner, want uint64) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		got := s.asked
		s.mu.Unlock()
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("callers in pidsIn: %d, want %d", got, want)
		}
	}
}

// TestProcScannerServesOnlyScansStartedAfterTheCall: a caller that asks while a scan runs must
// not get that scan's answer (it may have started before the caller's process did); it gets the
// next scan, which it shares with every other caller waiting when that scan starts.
func TestProcScannerServesOnlyScansStartedAfterTheCall(t *testing.T) {
	f := &fakeScans{started: make(chan int), finish: make(chan struct{})}
	s := newProcScanner(f.scan)
	got := make(chan string, 4)
	ask := func(name string) {
		go func() { got <- fmt.Sprintf("%s:%v", name, s.pidsIn(1)) }()
	}
	ask("a")
	if n := <-f.started; n != 1 {
		t.Fatalf("first scan: got %d, want 1", n)
	}
	ask("b") // asks while scan 1 runs
	ask("c")
	waitAsked(t, s, 3)
	f.finish <- struct{}{} // scan 1 ends
	if g := <-got; g != "a:[1]" {
		t.Fatalf("answer after scan 1: got %s, want a:[1] (b and c asked after scan 1 started)", g)
	}
	if n := <-f.started; n != 2 {
		t.Fatalf("second scan: got %d, want 2", n)
	}
	ask("d") // asks while scan 2 runs: needs scan 3
	waitAsked(t, s, 4)
	f.finish <- struct{}{}
	answers := []string{<-got, <-got}
	slices.Sort(answers)
	if want := []string{"b:[2]", "c:[2]"}; !slices.Equal(answers, want) {
		t.Fatalf("answers after scan 2: got %v, want %v (one scan for both waiting callers)", answers, want)
	}
	if n := <-f.started; n != 3 {
		t.Fatalf("third scan: got %d, want 3", n)
	}
	f.finish <- struct{}{}
	if g := <-got; g != "d:[3]" {
		t.Fatalf("answer after scan 3: got %s, want d:[3]", g)
	}
	if f.n != 3 {
		t.Errorf("scans: got %d, want 3", f.n)
	}
}

func taskRecords(self uint32, recs ...[3]uint32) []byte {
	var b []byte
	for _, r := range recs {
		b = binary.NativeEndian.AppendUint32(b, r[0])
		b = binary.NativeEndian.AppendUint32(b, r[1])
		b = binary.NativeEndian.AppendUint32(b, r[2])
		b = binary.NativeEndian.AppendUint32(b, self)
	}
	return b
}

func TestParseTaskRecords(t *testing.T) {
	const self = 100
	b := taskRecords(self,
		[3]uint32{10, 10, 7}, // leader in 7
		[3]uint32{10, 11, 9}, // a thread of 10 in 9: /proc/10/ns/net says 7
		[3]uint32{12, 12, 7},
		[3]uint32{13, 13, 0},     // exiting: no namespace
		[3]uint32{self, self, 7}, // this process
		[3]uint32{14, 14, 8},
	)
	got, err := parseTaskRecords(b, self)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[uint64][]int{7: {10, 12}, 8: {14}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("parseTaskRecords: got %v, want %v", got, want)
	}
	if _, err := parseTaskRecords(taskRecords(5, [3]uint32{10, 10, 7}), self); !errors.Is(err, errNoTaskIter) {
		t.Errorf("reader named 5, self %d: got %v, want errNoTaskIter (ids of another pid namespace)", self, err)
	}
	if _, err := parseTaskRecords(b[:len(b)-1], self); !errors.Is(err, errNoTaskIter) {
		t.Errorf("truncated output: got %v, want errNoTaskIter", err)
	}
}

// requireTaskIter loads the iterator or skips (a failure under SYSBOX_TEST_REQUIRE_ALL=1).
func requireTaskIter(t *testing.T) {
	t.Helper()
	_, err := taskIter()
	testenv.Require(t, err == nil, fmt.Sprintf("BPF task iterator: %v", err))
}

// TestKernelTaskIteratorAgreesWithProc: for a node's namespace, the iterator and /proc name the
// same process (the node's main process, the only one inside).
func TestKernelTaskIteratorAgreesWithProc(t *testing.T) {
	l := newLab(t)
	requireTaskIter(t)
	n := l.node("sysbox_node.a", []string{"sleep", "infinity"})
	sc, err := l.d.readSidecar(n.h.ExternalID)
	if err != nil || sc.Pid <= 0 {
		t.Fatalf("sidecar: %+v, %v", sc, err)
	}
	it, _ := taskIter()
	byTask, err := scanTasksNetns(it)
	if err != nil {
		t.Fatal(err)
	}
	byProc := scanProcNetns()
	want := []int{sc.Pid}
	if got := byTask[sc.NsInode]; !slices.Equal(got, want) {
		t.Errorf("task iterator, namespace %d: got %v, want %v", sc.NsInode, got, want)
	}
	if got := byProc[sc.NsInode]; !slices.Equal(got, want) {
		t.Errorf("/proc, namespace %d: got %v, want %v", sc.NsInode, got, want)
	}
	// A child of this test in the host's namespace is listed there by both.
	runtime.LockOSThread() // the child is forked from this thread, in its namespace
	defer runtime.UnlockOSThread()
	host := threadNetns(t)
	child := exec.Command("sleep", "600")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	if byTask, err = scanTasksNetns(it); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(byTask[host], child.Process.Pid) {
		t.Errorf("task iterator: child %d not in the host namespace %d: %v", child.Process.Pid, host, byTask[host])
	}
	if !slices.Contains(scanProcNetns()[host], child.Process.Pid) {
		t.Errorf("/proc: child %d not in the host namespace %d", child.Process.Pid, host)
	}
	l.destroy([]*testNode{n})
}

// TestKernelDeleteNodeKillsProcessStartedJustBefore: a process that enters a node's namespace
// right before DeleteNode (not the recorded main process, so only a scan can find it) is
// killed, for several nodes deleted at once while other callers keep scans running, so that
// each delete asks while a scan that started before it is in progress.
func TestKernelDeleteNodeKillsProcessStartedJustBefore(t *testing.T) {
	l := newLab(t)
	var nodes []*testNode
	for i := range 4 {
		nodes = append(nodes, l.node(fmt.Sprintf("sysbox_node.n%d", i), []string{"sleep", "infinity"}))
	}
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range 2 {
		busy.Add(1)
		go func() {
			defer busy.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_ = pidsInNetns(0)
				}
			}
		}()
	}
	extras := make([]*exec.Cmd, len(nodes))
	for i, n := range nodes {
		extras[i] = exec.Command("sleep", "600")
		if err := l.d.enter(n.h.ExternalID, extras[i].Start); err != nil {
			close(stop)
			t.Fatalf("start a process in %s: %v", n.h.ExternalID, err)
		}
		cmd := extras[i]
		t.Cleanup(func() { _ = cmd.Process.Kill() })
	}
	l.deleteAll(nodes)
	close(stop)
	busy.Wait()
	for i, cmd := range extras {
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("%s: extra process %d ended with %v, want killed by SIGKILL", nodes[i].owner.Address, cmd.Process.Pid, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%s: extra process %d still runs 30 s after DeleteNode returned", nodes[i].owner.Address, cmd.Process.Pid)
		}
	}
	if objs := l.residue(); len(objs) != 0 {
		t.Errorf("residue after DeleteNode: %v", objs)
	}
}
