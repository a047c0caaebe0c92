package firecracker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/procfs"
)

// spawn starts `firecracker --api-sock SOCK --id NAME` (under the jailer when r is jailed, see
// jail.go) detached (own session, output to the node's log) and waits until its API answers
// GET / as a fresh instance of that id.
func (d *Driver) spawn(ctx context.Context, r nodeRecord) (pid int, start uint64, err error) {
	name, dir, sock := r.Name, d.nodeDir(r.Name), r.Socket
	var argv []string
	if r.Jail != nil {
		argv = r.Jail.argv(name)
	} else {
		bin, err := exec.LookPath(d.binary)
		if err != nil {
			return 0, 0, fmt.Errorf("firecracker node %s: binary %q: %w", name, d.binary, err)
		}
		argv = []string{bin, "--api-sock", sock, "--id", name}
	}
	// A process started for this socket by a run killed before it recorded the pid would
	// otherwise outlive every later generation; the directory is ours (checked by callers).
	if err := killStrays(ctx, name, sock); err != nil {
		return 0, 0, err
	}
	// A socket left by a dead process of this node.
	_ = os.Remove(sock)
	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return 0, 0, fmt.Errorf("firecracker node %s: log: %w", name, err)
	}
	defer logf.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("firecracker node %s: start %s: %w", name, argv[0], err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // reap it whenever it ends
	pid = cmd.Process.Pid
	start, err = procfs.StartTime(pid)
	if err == nil {
		err = waitAPI(ctx, sock, name, exited)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		return 0, 0, fmt.Errorf("firecracker node %s: %w (log: %s)", name, err, filepath.Join(dir, logFile))
	}
	return pid, start, nil
}

// waitAPI polls GET / until the new process answers for id.
func waitAPI(ctx context.Context, sock, id string, exited <-chan struct{}) error {
	c, err := NewClient(sock)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		info, err := c.Describe(ctx)
		if err == nil {
			if info.ID != id || info.State != StateNotStarted {
				return fmt.Errorf("API on %s answers id %q state %q; want %q %q", sock, info.ID, info.State, id, StateNotStarted)
			}
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("the VMM exited before its API answered")
		case <-ctx.Done():
			return fmt.Errorf("API on %s did not answer: %v", sock, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// isOurVMM reports whether pid is still the VMM process the record names: same start time and
// serving exactly sock. A recycled pid or a foreign firecracker never matches.
func isOurVMM(pid int, start uint64, sock string) bool {
	return procfs.Alive(pid, start) && serves(pid, sock)
}

// serves reports whether process pid serves exactly the host socket path sock: its command
// line says --api-sock SOCK; or, jailed (sock is CHROOT/api.sock), it runs chrooted in CHROOT
// with --api-sock /api.sock, or it is still the jailer of that chroot (--id NAME and
// --chroot-base-dir BASE, before it execs the VMM).
func serves(pid int, sock string) bool {
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	if bytes.Contains(cmdline, []byte("\x00--api-sock\x00"+sock+"\x00")) {
		return true
	}
	root := filepath.Dir(sock)
	if filepath.Base(root) != jailRootDir || !bytes.Contains(cmdline, []byte("\x00--api-sock\x00/"+filepath.Base(sock)+"\x00")) {
		return false
	}
	// A chroot removed under its running VMM reads "… (deleted)": still that VMM.
	if r, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/root"); err == nil && (r == root || r == root+" (deleted)") {
		return true
	}
	jailDir := filepath.Dir(root) // BASE/<exec>/NAME
	return bytes.Contains(cmdline, []byte("\x00--id\x00"+filepath.Base(jailDir)+"\x00")) &&
		bytes.Contains(cmdline, []byte("\x00--chroot-base-dir\x00"+filepath.Dir(filepath.Dir(jailDir))+"\x00"))
}

// serving lists the processes that serve exactly sock (see serves).
func serving(sock string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if serves(pid, sock) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killStrays ends every VMM process serving sock (a path inside the node's owned directory)
// that no record names: one spawned by a run killed between starting it and recording its
// pid. It waits for them to go.
func killStrays(ctx context.Context, name, sock string) error {
	for _, pid := range serving(sock) {
		start, err := procfs.StartTime(pid)
		if err != nil {
			continue // already gone
		}
		if err := killVMM(ctx, name, nodeRecord{PID: pid, StartTime: start, Socket: sock}); err != nil {
			return err
		}
	}
	return nil
}

// killVMM ends the recorded VMM process if it is still ours, and waits for it to go.
func killVMM(ctx context.Context, name string, r nodeRecord) error {
	if !isOurVMM(r.PID, r.StartTime, r.Socket) {
		return nil
	}
	// Firecracker has no graceful shutdown for a guest without ACPI; SIGKILL is what its own
	// tooling uses once the guest is done.
	if err := syscall.Kill(r.PID, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("firecracker node %s: kill pid %d: %w", name, r.PID, err)
	}
	for isOurVMM(r.PID, r.StartTime, r.Socket) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("firecracker node %s: pid %d still running: %w", name, r.PID, driver.ErrUnavailable)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
