package argv

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestExecNoShellExpansion(t *testing.T) {
	res, err := Exec{}.Run(context.Background(), Cmd{Argv: []string{"/bin/echo", "$HOME", "a;b", "*"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "$HOME a;b *\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestExecExitCode(t *testing.T) {
	res, err := Exec{}.Run(context.Background(), Cmd{Argv: []string{"/bin/sh", "-c", "echo oops >&2; exit 3"}})
	var ee *ExitError
	if !errors.As(err, &ee) || res.ExitCode != 3 || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("got %v (code %d), want ExitError code 3 mentioning stderr", err, res.ExitCode)
	}
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	start := time.Now()
	// The child sleeps in a subshell: killing only the parent would leave it holding stdout open.
	res, err := Exec{}.Run(context.Background(), Cmd{Argv: []string{"/bin/sh", "-c", "(sleep 30; echo late) & sleep 30"}, Timeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) || !res.TimedOut {
		t.Fatalf("got %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %s: process group not killed", d)
	}
}

func TestExecBoundedOutput(t *testing.T) {
	res, err := Exec{}.Run(context.Background(), Cmd{Argv: []string{"/bin/sh", "-c", "head -c 100000 /dev/zero"}, MaxOutput: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Stdout) != 1000 || !res.Truncated {
		t.Fatalf("got %d bytes truncated=%v, want 1000 true", len(res.Stdout), res.Truncated)
	}
}

func TestExecEmptyArgv(t *testing.T) {
	if _, err := (Exec{}).Run(context.Background(), Cmd{}); err == nil {
		t.Fatal("empty argv accepted")
	}
}

func TestFakeScripts(t *testing.T) {
	f := &Fake{Script: map[string]FakeResponse{"hook apply": {Err: errors.New("failed")}}, Strict: true}
	if _, err := f.Run(context.Background(), Cmd{Argv: []string{"hook", "apply"}}); err == nil {
		t.Fatal("scripted error not returned")
	}
	if _, err := f.Run(context.Background(), Cmd{Argv: []string{"other"}}); err == nil {
		t.Fatal("strict fake accepted unscripted command")
	}
	if got := f.Argvs(); len(got) != 2 || got[0] != "hook apply" {
		t.Fatalf("got %v", got)
	}
}
