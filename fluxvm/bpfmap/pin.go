package bpfmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// bpfFSMagic is BPF_FS_MAGIC from linux/magic.h.
const bpfFSMagic = 0xcafe4a11

// pinRef is a declared pin that has been resolved beneath its root and checked to live on a bpf
// filesystem. While it is open, fd pins the very inode that was checked, so the later
// BPF_OBJ_GET cannot be redirected by a concurrent rename or symlink swap.
type pinRef struct {
	declared string // the pin as the plan declared it
	fd       int    // O_PATH descriptor of the checked inode, -1 when openat2 is unavailable
	resolved string // fallback path (symlinks evaluated) when fd is -1
}

// objPath is the path handed to BPF_OBJ_GET. With an O_PATH descriptor it is the descriptor's
// magic link, which the kernel follows to the checked inode.
func (p *pinRef) objPath() string {
	if p.fd >= 0 {
		return "/proc/self/fd/" + strconv.Itoa(p.fd)
	}
	return p.resolved
}

func (p *pinRef) Close() {
	if p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// checkPinLexical rejects a pin that is not absolute, contains "..", or is not strictly beneath
// root, and returns the pin relative to the cleaned root.
func checkPinLexical(root, pin string) (cleanRoot, rel string, err error) {
	if root == "" || !filepath.IsAbs(root) {
		return "", "", fmt.Errorf("bpffs_root %q: must be an absolute path", root)
	}
	if pin == "" || !filepath.IsAbs(pin) {
		return "", "", fmt.Errorf("pin %q: must be an absolute path", pin)
	}
	for _, part := range strings.Split(pin, "/") {
		if part == ".." {
			return "", "", fmt.Errorf("pin %s: contains \"..\": %w", pin, ErrPinEscape)
		}
	}
	cleanRoot = filepath.Clean(root)
	rel, err = filepath.Rel(cleanRoot, filepath.Clean(pin))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", "", fmt.Errorf("pin %s: not beneath bpffs_root %s: %w", pin, cleanRoot, ErrPinEscape)
	}
	return cleanRoot, rel, nil
}

// resolvePin opens the declared pin beneath root without following any symlink out of root
// (openat2 RESOLVE_BENEATH) and checks that the inode is on a bpf filesystem. Nothing else in
// bpffs is opened or listed. A missing pin wraps both ErrMapMissing and fs.ErrNotExist.
func resolvePin(root, pin string) (*pinRef, error) {
	cleanRoot, rel, err := checkPinLexical(root, pin)
	if err != nil {
		return nil, err
	}
	rootFD, err := unix.Open(cleanRoot, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("bpffs_root %s: %w", cleanRoot, &os.PathError{Op: "open", Path: cleanRoot, Err: err})
	}
	defer unix.Close(rootFD)

	fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		ref := &pinRef{declared: pin, fd: fd}
		if err := checkBPFFS(fd, pin); err != nil {
			ref.Close()
			return nil, err
		}
		return ref, nil
	case errors.Is(err, unix.ENOSYS):
		return resolvePinFallback(cleanRoot, pin)
	case errors.Is(err, unix.EXDEV):
		return nil, fmt.Errorf("pin %s: a symlink leads outside bpffs_root %s: %w", pin, cleanRoot, ErrPinEscape)
	case errors.Is(err, unix.ENOENT):
		return nil, fmt.Errorf("pin %s: %w: %w", pin, ErrMapMissing, os.ErrNotExist)
	case errors.Is(err, unix.ELOOP):
		return nil, fmt.Errorf("pin %s: too many symlinks or a magic link: %w", pin, ErrPinEscape)
	default:
		return nil, fmt.Errorf("pin %s: %w", pin, &os.PathError{Op: "openat2", Path: pin, Err: err})
	}
}

// resolvePinFallback is for kernels without openat2 (< 5.6): evaluate symlinks, re-check
// containment, then statfs the resolved path. It is racy against a concurrent symlink swap by
// someone who can already write to bpffs; openat2 is used wherever it exists.
func resolvePinFallback(cleanRoot, pin string) (*pinRef, error) {
	realRoot, err := filepath.EvalSymlinks(cleanRoot)
	if err != nil {
		return nil, fmt.Errorf("bpffs_root %s: %w", cleanRoot, err)
	}
	real, err := filepath.EvalSymlinks(pin)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("pin %s: %w: %w", pin, ErrMapMissing, os.ErrNotExist)
	}
	if err != nil {
		return nil, fmt.Errorf("pin %s: %w", pin, err)
	}
	if _, _, err := checkPinLexical(realRoot, real); err != nil {
		return nil, fmt.Errorf("pin %s: resolves to %s, outside bpffs_root %s: %w", pin, real, realRoot, ErrPinEscape)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(real, &st); err != nil {
		return nil, fmt.Errorf("pin %s: statfs: %w", pin, err)
	}
	if uint32(st.Type) != bpfFSMagic {
		return nil, fmt.Errorf("pin %s: filesystem magic %#x: %w", pin, uint32(st.Type), ErrNotBPFFS)
	}
	return &pinRef{declared: pin, fd: -1, resolved: real}, nil
}

func checkBPFFS(fd int, pin string) error {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return fmt.Errorf("pin %s: statfs: %w", pin, err)
	}
	if uint32(st.Type) != bpfFSMagic {
		return fmt.Errorf("pin %s: filesystem magic %#x: %w", pin, uint32(st.Type), ErrNotBPFFS)
	}
	return nil
}

// IsBPFFS reports whether dir is on a mounted bpf filesystem.
func IsBPFFS(dir string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return uint32(st.Type) == bpfFSMagic, nil
}
