package quickstart_test

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/testenv"
)

// headingLines picks a demo script's heading function and whatever decides its styling, so
// that the function can be called without running the demo.
var headingLines = regexp.MustCompile(`(?m)^(if \[ -t 1 \].*|(step|say)\(\) \{.*)$`)

// TestDemoHeadingsPlainWhenNotATerminal: the demo scripts use ANSI bold only when stdout is a
// terminal; piped into a file or a CI log, their headings are plain text.
func TestDemoHeadingsPlainWhenNotATerminal(t *testing.T) {
	bash := testenv.RequireBinary(t, "bash")
	for _, tc := range []struct{ script, fn string }{
		{"demo.sh", "step"},
		{"../fluxvm-upgrade/demo.sh", "say"},
	} {
		t.Run(tc.script, func(t *testing.T) {
			src, err := os.ReadFile(tc.script)
			if err != nil {
				t.Fatal(err)
			}
			defs := strings.Join(headingLines.FindAllString(string(src), -1), "\n")
			if !strings.Contains(defs, tc.fn+"()") {
				t.Fatalf("%s: no %s() heading function found", tc.script, tc.fn)
			}
			prog := defs + "\n" + tc.fn + " hello heading\n"
			out, err := exec.Command(bash, "-c", prog).Output() // stdout is a pipe
			if err != nil {
				t.Fatalf("%s: %v", tc.script, err)
			}
			if got, want := string(out), "\n== hello heading\n"; got != want {
				t.Fatalf("%s piped: got %q, want %q", tc.script, got, want)
			}
			// On a terminal (script(1) gives it one) the heading is bold.
			// util-linux script(1) absent skips only through testenv (fails under REQUIRE_ALL).
			scriptBin := testenv.RequireBinary(t, "script")
			tty, err := exec.Command(scriptBin, "-qec", bash+" -c "+shellQuote(prog), "/dev/null").Output()
			if err != nil {
				t.Fatalf("%s under script(1): %v", tc.script, err)
			}
			if !bytes.Contains(tty, []byte("\x1b[1m== hello heading\x1b[0m")) {
				t.Fatalf("%s on a terminal: got %q, want the heading in bold", tc.script, tty)
			}
		})
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
