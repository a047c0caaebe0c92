// Package badinput gives every sysbox command that reads a file the inputs an operator gets
// wrong — missing, a directory, unreadable, empty, 100 MB, invalid UTF-8, a symlink loop, a FIFO —
// and checks that each fails at once (never hangs), exits 1, names the input, and writes nothing
// (no .sysbox/ directory, no driver call).
package badinput

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	testenv.MainWithBinary(m, &binary, "zyvor.dev/sysbox/cmd/sysbox", "sysboxtest")
}

// badFile is one bad input kind; nobody runs the command as user nobody (root reads anything).
type badFile struct {
	testenv.BadFile
	nobody bool
}

func badFiles() []badFile {
	var out []badFile
	for _, b := range testenv.BadFiles([]byte("resource \"sysbox_network\" \"\xff\xfe\" {}\nx = \"\xc3\x28\"\n")) {
		out = append(out, badFile{BadFile: b})
	}
	return append(out, badFile{nobody: true, BadFile: testenv.BadFile{Name: "unreadable", Make: func(p string) error {
		if err := os.WriteFile(p, []byte("# secret\n"), 0o644); err != nil {
			return err
		}
		return os.Chmod(p, 0o600)
	}}})
}

const goodTopology = `
substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}
`

func TestBadInputs(t *testing.T) {
	type use struct {
		file string                       // the input's file name in the topology directory
		good bool                         // the directory holds a valid topology besides
		args func(path string) [][]string // commands given the input
	}
	uses := []use{
		{file: "main.sysbox.hcl", args: func(string) [][]string {
			return [][]string{{"validate"}, {"plan"}, {"apply", "-auto-approve"}, {"destroy", "-auto-approve"},
				{"refresh"}, {"graph"}, {"output"}, {"fmt", "-check"}, {"reset", "sysbox_node.x"}}
		}},
		{file: "in.sysbox.vars.hcl", good: true, args: func(p string) [][]string {
			return [][]string{{"plan", "-var-file", p}, {"apply", "-auto-approve", "-var-file", p}, {"validate", "-var-file", p}}
		}},
		{file: "stored.plan", good: true, args: func(p string) [][]string {
			return [][]string{{"show", p}, {"apply", p}}
		}},
	}
	for _, u := range uses {
		for _, bad := range badFiles() {
			if u.file == "main.sysbox.hcl" && bad.Name == "empty" {
				continue // an empty topology is a valid one with nothing in it
			}
			if bad.Name == "empty" && strings.HasSuffix(u.file, ".vars.hcl") {
				continue // an empty variables file sets nothing: valid
			}
			t.Run(u.file+"/"+bad.Name, func(t *testing.T) {
				if bad.nobody {
					testenv.RequireRoot(t)
				}
				for _, args := range u.args(u.file) {
					if args[0] == "fmt" && (bad.Name == "missing" || bad.Name == "directory") {
						continue // fmt walks directories; none (or an empty one) is nothing to format
					}
					dir, err := os.MkdirTemp("", "sysbox-badinput-case-")
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { os.RemoveAll(dir) })
					if err := os.Chmod(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					if u.good {
						if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(goodTopology), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					if err := bad.Make(filepath.Join(dir, u.file)); err != nil {
						t.Fatal(err)
					}
					code, out := run(t, dir, bad.nobody, args)
					what := fmt.Sprintf("sysbox %s with a %s %s", strings.Join(args, " "), bad.Name, u.file)
					if code != 1 {
						t.Errorf("%s: exit %d, want 1:\n%s", what, code, out)
					}
					named := u.file
					if bad.Name == "missing" && u.file == "main.sysbox.hcl" {
						named = "*.sysbox.hcl" // no topology file at all: the directory is the input
					}
					if !strings.Contains(out, named) {
						t.Errorf("%s: the error does not name %s:\n%s", what, named, out)
					}
					for _, w := range []string{".sysbox", "world.json"} {
						if _, err := os.Lstat(filepath.Join(dir, w)); !errors.Is(err, os.ErrNotExist) {
							t.Errorf("%s: %s was written (%v)", what, w, err)
						}
					}
				}
			})
		}
	}
}

// run runs the binary in dir (as nobody when asked); a run that does not end within a minute
// is a hang and fails the test.
func run(t *testing.T, dir string, nobody bool, args []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, binary, args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "SYSBOX_TEST_FAKE_WORLD="+filepath.Join(dir, "world.json"))
	c.WaitDelay = 5 * time.Second
	c.Cancel = func() error { return c.Process.Kill() }
	if nobody {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	out, err := c.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("sysbox %v in %s hung (killed after a minute):\n%s", args, dir, out)
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("sysbox %v: %v", args, err)
	}
	return c.ProcessState.ExitCode(), string(out)
}
