package testenv

import (
	"fmt"
	"os"
	"syscall"
)

// BadFile is one kind of input file an operator gets wrong, for the commands' bad-input sweeps.
type BadFile struct {
	Name string
	// Make creates the bad input at path (its directory exists); "missing" creates nothing.
	Make func(path string) error
}

// BadFiles returns the bad inputs every file-reading command must refuse at once, naming the
// input: missing, a directory, empty, 100 MB (sparse), invalid UTF-8 (invalidUTF8, in the
// command's own syntax), a symlink loop and a FIFO (which blocks a naive reader). An
// unreadable file is left to the caller: how to make one depends on who runs the command.
func BadFiles(invalidUTF8 []byte) []BadFile {
	return []BadFile{
		{Name: "missing", Make: func(string) error { return nil }},
		{Name: "directory", Make: func(p string) error { return os.Mkdir(p, 0o755) }},
		{Name: "empty", Make: func(p string) error { return os.WriteFile(p, nil, 0o644) }},
		{Name: "100MB", Make: func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			err = f.Truncate(100 << 20) // sparse: 100 MB of NUL bytes
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}},
		{Name: "invalid-utf8", Make: func(p string) error { return os.WriteFile(p, invalidUTF8, 0o644) }},
		{Name: "symlink-loop", Make: func(p string) error {
			if err := os.Symlink(p+".loop", p); err != nil {
				return err
			}
			return os.Symlink(p, p+".loop")
		}},
		{Name: "fifo", Make: func(p string) error {
			if err := syscall.Mkfifo(p, 0o644); err != nil {
				return fmt.Errorf("mkfifo %s: %w", p, err)
			}
			return nil
		}},
	}
}
