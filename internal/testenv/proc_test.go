package testenv

import (
	"strings"
	"testing"
	"time"
)

// TestStartCollectsOutput: a started process's lines are waited for by prefix and kept, its
// environment includes what the caller adds, and the test's end kills it.
func TestStartCollectsOutput(t *testing.T) {
	sh := RequireBinary(t, "sh")
	var p *Proc
	t.Run("run", func(t *testing.T) {
		p = Start(t, []string{"PROC_TEST_WORD=hello"}, sh, "-c", `echo "first"; echo "word $PROC_TEST_WORD"; exec sleep 600`)
		if got := p.WaitLine(t, "word ", time.Minute); got != "word hello" {
			t.Fatalf("WaitLine: got %q, want %q", got, "word hello")
		}
		if out := p.Output(); !strings.Contains(out, "first\n") {
			t.Fatalf("Output: got %q, want it to hold the first line", out)
		}
	})
	// The subtest's cleanup killed and reaped the process.
	if p.Cmd.ProcessState == nil || p.Cmd.ProcessState.Success() {
		t.Fatalf("after the test the process state is %v, want killed", p.Cmd.ProcessState)
	}
}
