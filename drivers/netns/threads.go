package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Namespaces belong to threads: every switch into a node's namespaces (setns, unshare) happens
// on a locked OS thread, and that thread goes back to the Go scheduler only after it is
// switched back. A thread that cannot be (a failed switch back, or a private mount namespace
// that has nowhere to return to) stays locked until its goroutine ends, and the runtime then
// ends the thread with it.
//
// That last rule does not hold for the process's main thread: the runtime cannot end it, and
// instead parks it for good, still inside whatever namespaces it was left in. /proc/self/ns/*
// and every tool reading them then name a node's namespaces as this process's, and the node's
// namespace cannot be freed while the process lives. So the main thread never switches: work
// that lands on it is handed to another thread.

// onThread runs fn on a locked OS thread that is not the main thread. fn reports whether it
// left the thread in the namespaces (and filesystem context) it found it in; only then is the
// thread unlocked and reused, else it ends with its goroutine.
func onThread(fn func() (restored bool, err error)) error {
	errc := make(chan error, 1)
	go runOnThread(fn, errc)
	return <-errc
}

func runOnThread(fn func() (bool, error), errc chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// Holding the main thread locked while another goroutine runs fn keeps that goroutine
		// (and every other) off it.
		inner := make(chan error, 1)
		go runOnThread(fn, inner)
		err := <-inner
		runtime.UnlockOSThread()
		errc <- err
		return
	}
	restored, err := fn()
	if restored {
		runtime.UnlockOSThread()
	}
	errc <- err
}

// inNetns runs fn on a thread switched into the network namespace target (see onThread).
func inNetns(target vnetns.NsHandle, fn func() error) error {
	return onThread(func() (bool, error) {
		orig, err := vnetns.Get()
		if err != nil {
			return true, fmt.Errorf("current netns: %w", err)
		}
		defer orig.Close()
		if err := vnetns.Set(target); err != nil {
			return true, fmt.Errorf("enter netns: %w", err)
		}
		ferr := fn()
		if err := vnetns.Set(orig); err != nil {
			return false, errors.Join(ferr, fmt.Errorf("return to the original netns: %w", err))
		}
		return true, ferr
	})
}

// threadNs opens the calling thread's namespace of kind ("net", "uts", "mnt").
func threadNs(kind string) (*os.File, error) {
	return os.Open(fmt.Sprintf("/proc/self/task/%d/ns/%s", unix.Gettid(), kind))
}
