package config

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// MaxInputFile bounds a topology or variables file: far above any real topology, and a
// mistaken argument (a disk image, a log) fails at once instead of being parsed.
const MaxInputFile = 16 << 20

// ReadInput reads an input file the user named, refusing what is not a regular file before
// opening it (a FIFO or device would block or never end) and anything larger than limit.
// Errors name the path.
func ReadInput(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	switch {
	case fi.IsDir():
		return nil, fmt.Errorf("%s: is a directory, not a file", path)
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	case fi.Size() > limit:
		return nil, fmt.Errorf("%s: %d bytes, larger than the %d-byte limit for this input", path, fi.Size(), limit)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: larger than the %d-byte limit for this input", path, limit)
	}
	return b, nil
}
