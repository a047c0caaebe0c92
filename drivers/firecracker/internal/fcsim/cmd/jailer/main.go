// Command jailer is the test stand-in for Firecracker's jailer (docs/jailer.md), next to the
// firecracker stand-in. It does, for real, what the driver relies on:
//
//	jailer --id ID --exec-file FILE --uid U --gid G [--chroot-base-dir BASE] [--netns PATH] -- ARGS
//
// validates its arguments (id: letters, digits and hyphens, at most 64; the exec file's name
// must contain "firecracker"; numeric ids; absolute paths), makes BASE/<exec file name>/ID/root
// (the chroot; nothing is done when it exists), copies the exec file in, marks every inherited
// descriptor close-on-exec, joins the network namespace PATH, chroot(2)s, mknods /dev/net/tun
// (and /dev/kvm) inside, chowns them and the chroot to U:G, drops to U:G (setgroups, setgid,
// setuid) and execs `/<exec file name> --id=ID --start-time-us=… --start-time-cpu-us=… ARGS`
// with an empty environment, in place (the pid stays the caller's).
//
// Differences from the real jailer: chroot(2) instead of a mount namespace and pivot_root; no
// cgroups, resource limits, --daemonize or --new-pid-ns (refused). And, as the stand-in's
// plumbing (the firecracker stand-in's guest is not KVM): before dropping privileges it starts
// the guest helper (the exec file with --fcsim-guest-helper, outside the jail, as root) and
// passes the VMM a descriptor to it, plus the request log and snapshot ledger named by
// FCSIM_REQUEST_LOG and FCSIM_SNAPSHOT_LEDGER, opened before the chroot.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func init() {
	// setns(CLONE_NEWNET) changes the calling thread only: join, chroot and exec from one.
	runtime.LockOSThread()
}

func main() {
	err := run(os.Args[1:]) // returns only when it did not exec the VMM
	fmt.Fprintln(os.Stderr, "jailer (fcsim):", err)
	os.Exit(1)
}

type args struct {
	id, exec, base, netns string
	uid, gid              int
	extra                 []string
}

// parse reads the jailer's documented flags (--flag VALUE or --flag=VALUE) up to "--".
func parse(argv []string) (args, error) {
	a := args{base: "/srv/jailer", uid: -1, gid: -1}
	for i := 0; i < len(argv); i++ {
		k := argv[i]
		if k == "--" {
			a.extra = argv[i+1:]
			break
		}
		v, hasV := "", false
		if j := strings.IndexByte(k, '='); j > 0 {
			k, v, hasV = k[:j], k[j+1:], true
		}
		switch k {
		case "--daemonize", "--new-pid-ns", "--cgroup", "--cgroup-version", "--parent-cgroup", "--resource-limit":
			return a, fmt.Errorf("%s: not simulated by the stand-in", k)
		case "--id", "--exec-file", "--uid", "--gid", "--chroot-base-dir", "--netns":
		default:
			return a, fmt.Errorf("unknown argument %q", argv[i])
		}
		if !hasV {
			if i+1 >= len(argv) {
				return a, fmt.Errorf("%s needs a value", k)
			}
			i++
			v = argv[i]
		}
		var err error
		switch k {
		case "--id":
			a.id = v
		case "--exec-file":
			a.exec = v
		case "--chroot-base-dir":
			a.base = v
		case "--netns":
			a.netns = v
		case "--uid":
			a.uid, err = id(k, v)
		case "--gid":
			a.gid, err = id(k, v)
		}
		if err != nil {
			return a, err
		}
	}
	switch {
	case a.id == "" || len(a.id) > 64 || strings.Trim(a.id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "":
		return a, fmt.Errorf("--id %q: want 1 to 64 letters, digits and hyphens", a.id)
	case a.exec == "":
		return a, errors.New("--exec-file is required")
	case !strings.Contains(filepath.Base(a.exec), "firecracker"):
		return a, fmt.Errorf("--exec-file %q: the file name must contain \"firecracker\"", a.exec)
	case a.uid < 0 || a.gid < 0:
		return a, errors.New("--uid and --gid are required")
	case !filepath.IsAbs(a.base):
		return a, fmt.Errorf("--chroot-base-dir %q: want an absolute path", a.base)
	case a.netns != "" && !filepath.IsAbs(a.netns):
		return a, fmt.Errorf("--netns %q: want an absolute path", a.netns)
	}
	fi, err := os.Stat(a.exec)
	if err != nil || !fi.Mode().IsRegular() {
		return a, fmt.Errorf("--exec-file %q: not a regular file: %v", a.exec, err)
	}
	return a, nil
}

func id(k, v string) (int, error) {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s %q: want a decimal id", k, v)
	}
	return int(n), nil
}

func run(argv []string) error {
	start := time.Now()
	a, err := parse(argv)
	if err != nil {
		return err
	}
	// Only the descriptors this stand-in hands on survive the exec.
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, e := range ents {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				unix.CloseOnExec(fd)
			}
		}
	}
	name := filepath.Base(a.exec)
	root := filepath.Join(filepath.Clean(a.base), name, a.id, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	if err := copyFile(a.exec, filepath.Join(root, name)); err != nil {
		return err
	}
	extra, keep, err := handOn(a, root)
	if err != nil {
		return err
	}
	if err := enterJail(a, root); err != nil {
		return err
	}
	for _, f := range keep {
		if _, _, errno := unix.Syscall(unix.SYS_FCNTL, f.Fd(), unix.F_SETFD, 0); errno != 0 {
			return fmt.Errorf("hand on descriptor %d: %w", f.Fd(), errno)
		}
	}
	us := strconv.FormatInt(start.UnixMicro(), 10)
	vmmArgv := append([]string{"./" + name, "--id=" + a.id, "--start-time-us=" + us, "--start-time-cpu-us=0"}, a.extra...)
	vmmArgv = append(vmmArgv, extra...)
	err = syscall.Exec("/"+name, vmmArgv, []string{})
	runtime.KeepAlive(keep) // no finalizer may close a handed-on descriptor before the exec
	return fmt.Errorf("exec /%s in %s: %w", name, root, err)
}

// handOn opens what the stand-in hands the VMM (request log, snapshot ledger, guest helper
// connection) and returns the VMM's extra arguments naming them, and the files to keep open.
func handOn(a args, root string) (extra []string, keep []*os.File, err error) {
	for _, p := range []struct{ env, flag string }{{"FCSIM_REQUEST_LOG", "--fcsim-request-log-fd"}, {"FCSIM_SNAPSHOT_LEDGER", "--fcsim-ledger-fd"}} {
		if v := os.Getenv(p.env); v != "" {
			f, err := os.OpenFile(v, os.O_CREATE|os.O_RDWR|os.O_APPEND, 0o600)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", p.env, err)
			}
			keep = append(keep, f)
			extra = append(extra, p.flag, strconv.Itoa(int(f.Fd())))
		}
	}
	helper, err := startHelper(a, filepath.Join(root, "guest"))
	if err != nil {
		return nil, nil, err
	}
	keep = append(keep, helper)
	extra = append(extra, "--fcsim-guest-helper-fd", strconv.Itoa(int(helper.Fd())))
	return extra, keep, nil
}

// enterJail joins the network namespace, chroots, makes the device nodes, chowns the chroot
// and drops privileges, as the jailer documents.
func enterJail(a args, root string) error {
	if a.netns != "" {
		f, err := os.Open(a.netns)
		if err != nil {
			return fmt.Errorf("--netns: %w", err)
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			return fmt.Errorf("--netns %s: join: %w", a.netns, err)
		}
	}
	if err := unix.Chroot(root); err != nil {
		return fmt.Errorf("chroot %s: %w", root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	for _, dev := range []struct {
		path         string
		major, minor uint32
	}{{"/dev/net/tun", 10, 200}, {"/dev/kvm", 10, 232}} {
		if err := os.MkdirAll(filepath.Dir(dev.path), 0o755); err != nil {
			return err
		}
		_ = os.Remove(dev.path)
		if err := unix.Mknod(dev.path, unix.S_IFCHR|0o600, int(unix.Mkdev(dev.major, dev.minor))); err != nil {
			return fmt.Errorf("mknod %s: %w", dev.path, err)
		}
		if err := os.Chown(dev.path, a.uid, a.gid); err != nil {
			return err
		}
	}
	if err := os.Chown("/", a.uid, a.gid); err != nil {
		return fmt.Errorf("chown the chroot: %w", err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(a.gid); err != nil {
		return fmt.Errorf("setgid %d: %w", a.gid, err)
	}
	if err := syscall.Setuid(a.uid); err != nil {
		return fmt.Errorf("setuid %d: %w", a.uid, err)
	}
	return nil
}

// startHelper starts the guest helper (see the firecracker stand-in's helper.go) outside the
// jail and returns the VMM's end of its connection.
func startHelper(a args, guestDir string) (*os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("guest helper: %w", err)
	}
	vmm, theirs := os.NewFile(uintptr(fds[0]), "guest-helper"), os.NewFile(uintptr(fds[1]), "vmm")
	defer theirs.Close()
	cmd := exec.Command(a.exec, "--fcsim-guest-helper", guestDir, "--fcsim-owner", fmt.Sprintf("%d:%d", a.uid, a.gid))
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		vmm.Close()
		return nil, fmt.Errorf("guest helper: %w", err)
	}
	// Not waited for: it outlives this process image (the VMM); init reaps it.
	return vmm, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("--exec-file: %w", err)
	}
	defer in.Close()
	_ = os.Remove(dst)
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return fmt.Errorf("copy the exec file: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy the exec file: %w", err)
	}
	return out.Close()
}
