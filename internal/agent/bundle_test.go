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
