package durable

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrDanglingSymlink says a path names a symlink whose target is missing. Readers of state-like
// files must not take it for "nothing stored yet": a first save would then pass a compare-and-swap
// at serial 0 and replace whatever the link was meant to reach.
var ErrDanglingSymlink = errors.New("dangling symlink")

// ReadFileIfExists reads path. ok is false only when nothing at all is at path (ENOENT with no
// directory entry of its own); a dangling symlink is an error wrapping ErrDanglingSymlink, and
// every other failure (EACCES, EISDIR, ENOTDIR, EIO) is returned as is.
func ReadFileIfExists(path string) (data []byte, ok bool, err error) {
	data, err = os.ReadFile(path)
	if err == nil {
		return data, true, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, err
	}
	if err := Absent(path); err != nil {
		return nil, false, err
	}
	return nil, false, nil
}

// Absent confirms, after an open of path failed with ENOENT, that nothing is at path: nil when
// there is no directory entry, an error wrapping ErrDanglingSymlink when path is a symlink to a
// missing target, and the Lstat error otherwise.
func Absent(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return fmt.Errorf("%s: %w to %q (its target is missing): refusing to treat it as absent", path, ErrDanglingSymlink, target)
	default:
		// Created between the open and the Lstat: not absent.
		return fmt.Errorf("%s: appeared while it was read (%v): refusing to treat it as absent", path, fi.Mode().Type())
	}
}
