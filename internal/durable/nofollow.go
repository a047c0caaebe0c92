package durable

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// ErrNotRegular is wrapped when a path that must be a regular file is a symlink, a directory, a
// FIFO, a device or a socket. Evidence, journals and snapshots are never read through symlinks.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is wrapped when a file exceeds the reader's size limit.
var ErrTooLarge = errors.New("file too large")

// OpenRegularAt opens name relative to the directory fd dirfd (unix.AT_FDCWD for the current
// directory) read-only without following a symlink in its last component, and refuses anything
// but a regular file. O_NONBLOCK keeps a FIFO planted in place of a file from blocking the open.
func OpenRegularAt(dirfd int, name string) (*os.File, error) {
	return openRegularAt(dirfd, name, unix.O_NOFOLLOW)
}

func openRegularAt(dirfd int, name string, extra int) (*os.File, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY|extra, 0)
	if errors.Is(err, unix.ELOOP) && extra&unix.O_NOFOLLOW != 0 {
		return nil, fmt.Errorf("%s: %w (a symlink)", name, ErrNotRegular)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: %w (%s)", name, ErrNotRegular, FileTypeName(st.Mode))
	}
	// Back to blocking reads: a regular file never blocks, and os.File would otherwise use the
	// poller for it.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// OpenRegular is OpenRegularAt relative to the current directory.
func OpenRegular(path string) (*os.File, error) { return OpenRegularAt(unix.AT_FDCWD, path) }

// ReadRegularAt reads the regular file name relative to dirfd (see OpenRegularAt), at most max
// bytes (max <= 0: no limit); a larger file wraps ErrTooLarge rather than being cut.
func ReadRegularAt(dirfd int, name string, max int64) ([]byte, error) {
	f, err := OpenRegularAt(dirfd, name)
	if err != nil {
		return nil, err
	}
	return readLimited(f, name, max)
}

// ReadInputFile reads a file an operator names on the command line: symlinks are followed (the
// operator chose the path), but only a regular file is read — a FIFO or device is refused
// without blocking — and at most max bytes (a larger file wraps ErrTooLarge).
func ReadInputFile(path string, max int64) ([]byte, error) {
	f, err := openRegularAt(unix.AT_FDCWD, path, 0)
	if err != nil {
		return nil, err
	}
	return readLimited(f, path, max)
}

func readLimited(f *os.File, name string, max int64) ([]byte, error) {
	defer f.Close()
	var r io.Reader = f
	if max > 0 {
		r = io.LimitReader(f, max+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err // an *fs.PathError naming the file
	}
	if max > 0 && int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w (more than %d bytes)", name, ErrTooLarge, max)
	}
	return b, nil
}

// ReadRegular reads the regular file at path without following a final symlink (see
// ReadRegularAt).
func ReadRegular(path string, max int64) ([]byte, error) {
	return ReadRegularAt(unix.AT_FDCWD, path, max)
}

// FileTypeName names the file type in a stat mode ("a directory", "a symlink", ...) for errors.
func FileTypeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFLNK:
		return "a symlink"
	}
	return fmt.Sprintf("file type %#o", mode&unix.S_IFMT)
}
