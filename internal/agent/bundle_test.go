package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBundleRoundTrip(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "modules", "m"), 0o755)
	os.MkdirAll(filepath.Join(src, ".sysbox"), 0o755)
	os.WriteFile(filepath.Join(src, "main.sysbox.hcl"), []byte("a"), 0o644)
	os.WriteFile(filepath.Join(src, "modules", "m", "m.sysbox.hcl"), []byte("b"), 0o644)
	os.WriteFile(filepath.Join(src, ".sysbox", "state"), []byte("secret state"), 0o644)
	b1, err := PackDir(src)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b1), "secret state") {
		t.Fatal("the bundle holds the .sysbox directory")
	}
	b2, _ := PackDir(src)
	if string(b1) != string(b2) {
		t.Fatal("packing twice gave different bytes")
	}
	dst := t.TempDir()
	if err := Unpack(b1, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "modules", "m", "m.sysbox.hcl")); string(got) != "b" {
		t.Fatalf("got %q, want b", got)
	}
	for _, bad := range []string{"../x", "/etc/x", "a/../../x", ".sysbox/state", "a/./b"} {
		if err := Unpack([]byte(`{"files":{"`+bad+`":"x"}}`), dst); err == nil {
			t.Errorf("unpacking %q: got nil error, want a refusal", bad)
		}
	}
}

// TestBundleKeepsBinaryFiles: a file that is not UTF-8 (a rootfs archive) comes back byte for
// byte (as a JSON string its invalid bytes would become U+FFFD).
func TestBundleKeepsBinaryFiles(t *testing.T) {
	src := t.TempDir()
	bin := []byte{0x1f, 0x8b, 0xff, 0xfe, 0x00, 'x', 0xc3}
	os.WriteFile(filepath.Join(src, "rootfs.tar"), bin, 0o644)
	os.WriteFile(filepath.Join(src, "main.sysbox.hcl"), []byte("text"), 0o644)
	b, err := PackDir(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := Unpack(b, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "rootfs.tar")); string(got) != string(bin) {
		t.Fatalf("got %x, want %x", got, bin)
	}
	if !strings.Contains(string(b), `"main.sysbox.hcl":"text"`) {
		t.Fatalf("a text file is not stored as text: %s", b)
	}
	if err := Unpack([]byte(`{"files":{"a":"x"},"binary":{"a":"eA=="}}`), dst); err == nil {
		t.Fatal("a name both text and binary: got nil error, want a refusal")
	}
	if err := Unpack([]byte(`{"files":{},"binary":{"../a":"eA=="}}`), dst); err == nil {
		t.Fatal("a binary file leaving the workspace: got nil error, want a refusal")
	}
}
