package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestBadFiles checks each generator makes what its name says.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	utf8 := []byte("x = \"\xff\xfe\"\n")
	for _, b := range BadFiles(utf8) {
		p := filepath.Join(dir, b.Name)
		if err := b.Make(p); err != nil {
			t.Fatalf("%s: %v", b.Name, err)
		}
		fi, err := os.Lstat(p)
		switch b.Name {
		case "missing":
			if !errors.Is(err, os.ErrNotExist) {
				t.Errorf("missing: got %v, want no file", err)
			}
			continue
		case "symlink-loop":
			if _, serr := os.Stat(p); err != nil || !errors.Is(serr, syscall.ELOOP) {
				t.Errorf("symlink-loop: lstat %v, stat %v, want a link whose resolution loops", err, serr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", b.Name, err)
		}
		var ok bool
		switch b.Name {
		case "directory":
			ok = fi.IsDir()
		case "empty":
			ok = fi.Mode().IsRegular() && fi.Size() == 0
		case "100MB":
			ok = fi.Mode().IsRegular() && fi.Size() == 100<<20
		case "invalid-utf8":
			got, _ := os.ReadFile(p)
			ok = string(got) == string(utf8)
		case "fifo":
			ok = fi.Mode()&os.ModeNamedPipe != 0
		default:
			t.Errorf("%s: no check for this kind", b.Name)
			continue
		}
		if !ok {
			t.Errorf("%s: got mode %v size %d", b.Name, fi.Mode(), fi.Size())
		}
	}
}
