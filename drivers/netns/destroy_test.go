package netns

import (
	"context"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/procfs"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestPidsInNetnsSeesProcessesStartedBeforeTheCall: the shared /proc scan never answers with a
// scan older than the call. A child started after one scan must be in the answer of every
// concurrent caller that asked after it started.
func TestPidsInNetnsSeesProcessesStartedBeforeTheCall(t *testing.T) {
	runtime.LockOSThread() // the child is forked from this thread, in its namespace
	defer runtime.UnlockOSThread()
	ino := threadNetns(t)
	_ = pidsInNetns(ino) // a finished scan without the child
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var wg sync.WaitGroup
	missed := make(chan []int, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := pidsInNetns(ino); !slices.Contains(got, cmd.Process.Pid) {
				missed <- got
			}
		}()
	}
	wg.Wait()
	close(missed)
	for got := range missed {
		t.Errorf("pidsInNetns(own namespace) = %v, want it to contain child %d", got, cmd.Process.Pid)
	}
}

// TestKernelDeleteNodeRemovesHostEndsWithoutDetach: DeleteNode alone (no Detach first, as after
// a crash) removes the node's host-side veth end and its processes, run concurrently for two
// nodes, and leaves a third node on the same bridge untouched.
func TestKernelDeleteNodeRemovesHostEndsWithoutDetach(t *testing.T) {
	l := newLab(t)
	nh, no := l.network("sysbox_network.lan", "198.18.7.0/24")
	att := func(ip string) substrate.AttachmentSpec {
		return substrate.AttachmentSpec{Name: "lan", Network: nh, IPv4: []string{ip}}
	}
	nodes := []*testNode{
		l.node("sysbox_node.a", []string{"sleep", "infinity"}, att("198.18.7.10/24")),
		l.node("sysbox_node.b", []string{"sleep", "infinity"}, att("198.18.7.11/24")),
		l.node("sysbox_node.c", []string{"sleep", "infinity"}, att("198.18.7.12/24")),
	}
	hostEnd := func(n *testNode) string {
		p, err := decode(n.atts[0].Private, kindAttachment)
		if err != nil {
			t.Fatal(err)
		}
		return p.Veth.HostName
	}
	mainPid := func(n *testNode) int {
		sc, err := l.d.readSidecar(n.h.ExternalID)
		if err != nil || sc.Pid <= 0 {
			t.Fatalf("sidecar of %s: %+v, %v", n.owner.Address, sc, err)
		}
		return sc.Pid
	}
	var pids []int
	for _, n := range nodes {
		pids = append(pids, mainPid(n))
	}
	l.deleteAll(nodes[:2])
	for i, n := range nodes[:2] {
		if _, err := netlink.LinkByName(hostEnd(n)); err == nil {
			t.Errorf("%s: host end %s still exists after DeleteNode", n.owner.Address, hostEnd(n))
		}
		if alive(pids[i]) {
			t.Errorf("%s: main process %d still runs after DeleteNode", n.owner.Address, pids[i])
		}
	}
	c := nodes[2]
	if _, err := netlink.LinkByName(hostEnd(c)); err != nil {
		t.Errorf("%s: host end %s of the node left alone: %v", c.owner.Address, hostEnd(c), err)
	}
	if !alive(pids[2]) {
		t.Errorf("%s: main process %d of the node left alone is gone", c.owner.Address, pids[2])
	}
	l.destroy(nodes[2:], testNet{nh, no})
	if objs := l.residue(); len(objs) != 0 {
		t.Errorf("residue after destroy: %v", objs)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	_, err := procfs.StartTime(pid)
	return err == nil
}

// deleteAll calls DeleteNode for all nodes at once and waits for every call.
func (l *lab) deleteAll(nodes []*testNode) {
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := l.d.DeleteNode(context.Background(), n.h, n.owner); err != nil {
				l.t.Errorf("DeleteNode(%s): %v", n.owner.Address, err)
			}
		}()
	}
	wg.Wait()
}

// threadNetns is the network namespace of the calling thread (lock it first), which the
// children it starts inherit. Not /proc/self/ns/net: the process's main thread may be parked
// inside a node's namespace for good, by a goroutine that exited locked there (Driver.enter
// with a hosts file), so it says nothing about other threads.
func threadNetns(t *testing.T) uint64 {
	t.Helper()
	ino, err := nsInode(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		t.Fatal(err)
	}
	return ino
}
