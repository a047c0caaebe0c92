package sysbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDriverBlockSettings: a substrate driver block's settings reach the driver before any
// driver call; a setting the driver rejects fails validate, plan and apply at its attribute, and
// nothing runs.
func TestDriverBlockSettings(t *testing.T) {
	topo := func(driverBlocks string) string {
		return writeTopo(t, "substrate \"local\" {\n"+driverBlocks+"  backend \"local\" { path = \".sysbox/state\" }\n}\n")
	}
	rejected := []struct {
		name, blocks string
		env          []string
		want         []string
		notWant      string
	}{
		{"unknown key", "  driver \"libvirt\" {\n    sockt = \"/x.sock\"\n  }\n", nil,
			[]string{"main.sysbox.hcl:3:5", `substrate driver "libvirt": unknown setting "sockt" (known: socket)`}, ""},
		{"driver without settings", "  driver \"netns\" { a = \"b\" }\n", nil,
			[]string{"main.sysbox.hcl:2:20", `substrate driver "netns": unknown setting "a" (known: none)`}, ""},
		{"bad value", "  driver \"libvirt\" {\n    socket = \"run/libvirt-sock\"\n  }\n", nil,
			[]string{"main.sysbox.hcl:3:5", `setting "socket": "run/libvirt-sock" is not an absolute path`}, ""},
		{"not a string, number or bool", "  driver \"libvirt\" {\n    socket = [\"/x.sock\"]\n  }\n", nil,
			[]string{"main.sysbox.hcl:3:5", `setting "socket" must be a string, number or bool`}, ""},
		{"a number is read as its decimal string", "  driver \"libvirt\" {\n    socket = 5\n  }\n", nil,
			[]string{"main.sysbox.hcl:3:5", `setting "socket": "5" is not an absolute path`}, ""},
		{"bad value from a secret", "  driver \"libvirt\" {\n    socket = env(\"SOCK\")\n  }\n", []string{"SOCK=relative/s3cret-path"},
			[]string{"main.sysbox.hcl:3:5", `setting "socket"`, "is not an absolute path"}, "s3cret"},
	}
	for _, tc := range rejected {
		t.Run(tc.name, func(t *testing.T) {
			dir := topo(tc.blocks)
			for _, args := range [][]string{{"validate"}, {"plan"}, {"apply", "-auto-approve"}} {
				r := run(t, tc.env, false, append(args, "--chdir", dir)...)
				if r.code != ExitError {
					t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", args[0], r.code, ExitError, r.stdout, r.stderr)
				}
				for _, w := range tc.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%s: stderr lacks %q:\n%s", args[0], w, r.stderr)
					}
				}
				if tc.notWant != "" && strings.Contains(r.stdout+r.stderr, tc.notWant) {
					t.Errorf("%s: the secret value is in the output:\n%s%s", args[0], r.stdout, r.stderr)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, ".sysbox")); !os.IsNotExist(err) {
				t.Errorf("apply with a rejected driver setting touched the state directory: %v", err)
			}
		})
	}

	// The configured socket is the one the driver dials: destroy's residue audit asks libvirt,
	// which is unreachable there, and says where it looked.
	sock := filepath.Join(t.TempDir(), "nonexistent.sock")
	dir := topo(fmt.Sprintf("  driver \"libvirt\" { socket = %q }\n", sock))
	if r := run(t, nil, false, "validate", "--chdir", dir); r.code != 0 {
		t.Fatalf("validate: exit %d: %s", r.code, r.stderr)
	}
	t.Setenv("SYSBOX_LIBVIRT_SOCKET", "/run/elsewhere.sock") // the block wins over the environment
	r := run(t, nil, false, "destroy", "-auto-approve", "--chdir", dir)
	want := "libvirtd at " + sock + ": driver unavailable"
	if r.code == 0 || !strings.Contains(r.stderr, want) {
		t.Fatalf("destroy: exit %d, want a failure containing %q\nstdout: %s\nstderr: %s", r.code, want, r.stdout, r.stderr)
	}
}
