package crash

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/executor/exectest"
	"zyvor.dev/sysbox/internal/executor/failpoint"
	"zyvor.dev/sysbox/internal/testenv"
)

// TestReleaseBuildCarriesNoFailpoints: a normal build (no sysboxtest tag) links none of the
// executor's failpoint code, and refuses to run a command with a failpoint set instead of
// silently running it to the end.
func TestReleaseBuildCarriesNoFailpoints(t *testing.T) {
	release := testenv.BuildBinary(t, "zyvor.dev/sysbox/cmd/sysbox")
	gobin, err := testenv.GoTool()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(gobin, "tool", "nm", release).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	const pkg = "zyvor.dev/sysbox/internal/executor/failpoint."
	var found []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, pkg) || strings.Contains(line, "executorFailpoints.func") {
			found = append(found, strings.TrimSpace(line))
		}
	}
	if len(found) > 0 {
		t.Fatalf("release binary links failpoint code:\n%s", strings.Join(found, "\n"))
	}
	// The test build does link it: the check above looks for the right symbols.
	out, err = exec.Command(gobin, "tool", "nm", binary).Output()
	if err != nil {
		t.Fatalf("go tool nm: %v", err)
	}
	if !strings.Contains(string(out), pkg+"(*Set).Hit") {
		t.Fatalf("test build lacks %s(*Set).Hit: the symbol check looks for the wrong name", pkg)
	}

	for _, env := range []string{failpoint.EnvSpec + "=checkpoint@1", failpoint.EnvTrace + "=" + t.TempDir() + "/trace"} {
		c := exec.Command(release, "apply", "-auto-approve")
		c.Dir = t.TempDir() // no topology: without the refusal the command fails differently
		c.Env = append(os.Environ(), env)
		r := exectest.Run(t, "release apply with "+env, c)
		name, _, _ := strings.Cut(env, "=")
		if r.Killed || r.Code == 0 || !strings.Contains(r.Out, name+" is set, but this sysbox is not a test build") {
			t.Fatalf("release apply with %s: got killed=%v exit=%d\n%s\nwant a refusal naming %s", env, r.Killed, r.Code, r.Out, name)
		}
	}
}
