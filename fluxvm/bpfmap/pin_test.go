package bpfmap

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestResolvePinContainment builds a fake bpffs_root in a temp dir (not a bpf filesystem) with
// files and symlinks, and checks which pins are refused as escapes, which are missing, and which
// reach the bpf-magic check (and fail it, because a temp dir is not bpffs).
func TestResolvePinContainment(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "bpf")
	outside := filepath.Join(base, "outside")
	for _, d := range []string{root, outside, filepath.Join(root, "fluxvm")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(root, "fluxvm", "ct4"), filepath.Join(outside, "secret")} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		filepath.Join(root, "fluxvm", "rel-escape"): "../../outside/secret",
		filepath.Join(root, "fluxvm", "abs-escape"): filepath.Join(outside, "secret"),
		filepath.Join(root, "fluxvm", "etc"):        "/etc/passwd",
		filepath.Join(root, "fluxvm", "inside"):     "ct4",
		filepath.Join(root, "dirlink"):              outside,
	}
	for l, target := range links {
		if err := os.Symlink(target, l); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name string
		root string
		pin  string
		want error
	}{
		{"dotdot in pin", root, root + "/fluxvm/../../outside/secret", ErrPinEscape},
		{"dotdot that stays inside", root, root + "/fluxvm/../fluxvm/ct4", ErrPinEscape},
		{"sibling of root", root, outside + "/secret", ErrPinEscape},
		{"root prefix trick", root, root + "-evil/ct4", ErrPinEscape},
		{"root itself", root, root, ErrPinEscape},
		{"relative symlink escape", root, root + "/fluxvm/rel-escape", ErrPinEscape},
		{"absolute symlink escape", root, root + "/fluxvm/abs-escape", ErrPinEscape},
		{"symlink to /etc/passwd", root, root + "/fluxvm/etc", ErrPinEscape},
		{"directory symlink escape", root, root + "/dirlink/secret", ErrPinEscape},
		{"missing pin", root, root + "/fluxvm/nope", ErrMapMissing},
		{"plain file not on bpffs", root, root + "/fluxvm/ct4", ErrNotBPFFS},
		{"symlink inside root, not on bpffs", root, root + "/fluxvm/inside", ErrNotBPFFS},
		{"root with trailing slash", root + "/", root + "/fluxvm/ct4", ErrNotBPFFS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref, err := resolvePin(tt.root, tt.pin)
			if ref != nil {
				ref.Close()
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("resolvePin(%s, %s): got %v, want %v", tt.root, tt.pin, err, tt.want)
			}
		})
	}
	if _, err := resolvePin(root, root+"/fluxvm/nope"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing pin: got %v, want it to wrap os.ErrNotExist too", err)
	}
}

func TestResolvePinFallbackContainment(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "bpf")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "secret"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ok"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../secret", filepath.Join(root, "esc")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		pin  string
		want error
	}{
		{root + "/esc", ErrPinEscape},
		{root + "/ok", ErrNotBPFFS},
		{root + "/missing", ErrMapMissing},
	}
	for _, tt := range tests {
		_, err := resolvePinFallback(root, tt.pin)
		if !errors.Is(err, tt.want) {
			t.Errorf("resolvePinFallback(%s): got %v, want %v", tt.pin, err, tt.want)
		}
	}
}

func TestCheckPinLexicalNeedsAbsolutePaths(t *testing.T) {
	tests := []struct{ root, pin string }{
		{"sys/fs/bpf", "/sys/fs/bpf/x"},
		{"/sys/fs/bpf", "fluxvm/x"},
		{"", "/sys/fs/bpf/x"},
		{"/sys/fs/bpf", ""},
	}
	for _, tt := range tests {
		if _, _, err := checkPinLexical(tt.root, tt.pin); err == nil {
			t.Errorf("checkPinLexical(%q, %q): got nil error, want a refusal", tt.root, tt.pin)
		}
	}
}
