package netns

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// terminate sends SIGTERM to the recorded process pid and waits until it has exited, sending
// SIGKILL (without waiting further) once grace has passed. It waits on a pidfd, which the exit
// itself wakes: polling /proc every 20 ms made every stop of a running node take at least
// 20 ms. Without pidfds it polls.
func terminate(ctx context.Context, pid int, start, ino uint64, grace time.Duration) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return terminatePolling(ctx, pid, start, ino, grace)
	}
	defer unix.Close(fd)
	// The pidfd pins what it opened: check that it is the recorded process (pid not reused).
	if !processAlive(pid, start, ino) {
		return nil
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0)
	deadline := time.Now().Add(grace)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			return nil
		}
		// Short slices, so that a cancelled ctx is seen.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(min(left, 100*time.Millisecond)/time.Millisecond)+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for exit: %w", err)
		}
		if n > 0 {
			return nil // readable: the process has exited
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// terminatePolling is terminate for kernels without pidfds.
func terminatePolling(ctx context.Context, pid int, start, ino uint64, grace time.Duration) error {
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for processAlive(pid, start, ino) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
