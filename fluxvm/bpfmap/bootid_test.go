package bpfmap

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadBootIDFailsClosed: only a regular file holding one UUID is a boot id.
func TestReadBootIDFailsClosed(t *testing.T) {
	const good = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, p string)
		want  string // "" = accepted
	}{
		{"uuid", func(t *testing.T, p string) { os.WriteFile(p, []byte(good+"\n"), 0o600) }, ""},
		{"missing", func(*testing.T, string) {}, "no such file"},
		{"empty", func(t *testing.T, p string) { os.WriteFile(p, nil, 0o600) }, "empty"},
		{"newline only", func(t *testing.T, p string) { os.WriteFile(p, []byte("\n"), 0o600) }, "empty"},
		{"not a uuid", func(t *testing.T, p string) { os.WriteFile(p, []byte("same-boot\n"), 0o600) }, "not a UUID"},
		{"two lines", func(t *testing.T, p string) { os.WriteFile(p, []byte(good+"\n"+good+"\n"), 0o600) }, "not a UUID"},
		{"upper case", func(t *testing.T, p string) { os.WriteFile(p, []byte(strings.ToUpper(good)), 0o600) }, "not a UUID"},
		{"directory", func(t *testing.T, p string) { os.Mkdir(p, 0o700) }, "directory"},
		{"symlink", func(t *testing.T, p string) {
			q := p + ".real"
			os.WriteFile(q, []byte(good+"\n"), 0o600)
			os.Symlink(q, p)
		}, "symlink"},
		{"FIFO", func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "FIFO"},
		{"parent is a file (ENOTDIR)", func(t *testing.T, p string) { os.WriteFile(filepath.Dir(p), nil, 0o600) }, "not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "d")
			os.Mkdir(dir, 0o700)
			p := filepath.Join(dir, "boot_id")
			if strings.Contains(tc.name, "ENOTDIR") {
				os.Remove(dir)
			}
			tc.setup(t, p)
			id, err := NewStore(WithBootIDPath(p)).BootID()
			switch {
			case tc.want == "" && (err != nil || id != good):
				t.Errorf("got %q, %v; want %q", id, err, good)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %q, %v; want an error containing %q", id, err, tc.want)
			}
		})
	}
	if os.Getenv("SYSBOX_TEST_REQUIRE_ALL") == "1" || fileExists(DefaultBootIDPath) {
		if _, err := CurrentBootID(); err != nil {
			t.Errorf("this host's boot id: %v", err)
		}
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
