package sysbox

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/plans"
)

// countingWriter counts Write calls (each one a system call on stdout).
type countingWriter struct {
	bytes.Buffer
	writes int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(b)
}

// TestRenderPlanBuffersOutput: a large plan is printed completely, in a few writes rather than
// two per action.
func TestRenderPlanBuffersOutput(t *testing.T) {
	p := &plans.Plan{}
	for i := 0; i < 2000; i++ {
		p.Actions = append(p.Actions, plans.ResourceAction{Address: addrs.MustParseInstance(fmt.Sprintf("sysbox_node.n%d", i)),
			Action: plans.Create, Reason: "not in state", Type: "sysbox_node", Mode: "managed"})
	}
	var w countingWriter
	renderPlan(&w, p, false)
	out := w.String()
	if got := strings.Count(out, " create\n"); got != 2000 {
		t.Fatalf("got %d create lines, want 2000", got)
	}
	if !strings.Contains(out, "\nPlan: 2000 to create,") || !strings.HasSuffix(out, "unchanged.\n") {
		t.Fatalf("summary missing or not last: %q", out[max(0, len(out)-200):])
	}
	if w.writes > len(out)/(32<<10)+2 {
		t.Fatalf("%d writes for %d bytes: output is not buffered", w.writes, len(out))
	}
}
