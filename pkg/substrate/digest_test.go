package substrate_test

import (
	"os"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/pkg/substrate"
)

func TestDigestSource(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "img.tar")
	os.WriteFile(f, []byte("abc"), 0o644)
	d, n, err := substrate.DigestSource(f)
	if err != nil || d != "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" || n != 3 {
		t.Errorf("file: got %s %d %v", d, n, err)
	}
	root := filepath.Join(dir, "rootfs")
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	os.WriteFile(filepath.Join(root, "bin", "sh"), []byte("#!"), 0o755)
	d1, _, err := substrate.DigestSource(root)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(root, "bin", "sh"), 0o644)
	d2, _, _ := substrate.DigestSource(root)
	os.WriteFile(filepath.Join(root, "bin", "sh"), []byte("#?"), 0o644)
	d3, _, _ := substrate.DigestSource(root)
	if d1 == d2 || d2 == d3 || d1 == d3 {
		t.Errorf("directory digest must change with mode and content: %s %s %s", d1, d2, d3)
	}
	if _, _, err := substrate.DigestSource(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing source: got nil error")
	}
}
