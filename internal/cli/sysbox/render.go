package sysbox

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"zyvor.dev/sysbox/internal/plans"
)

const (
	ansiReset   = "\x1b[0m"
	ansiGreen   = "\x1b[32m"
	ansiYellow  = "\x1b[33m"
	ansiRed     = "\x1b[31m"
	ansiMagenta = "\x1b[35m"
	ansiCyan    = "\x1b[36m"
	ansiBold    = "\x1b[1m"
)

var actionStyle = map[plans.Action]struct{ sym, color string }{
	plans.Create:  {"+", ansiGreen},
	plans.Read:    {"<=", ansiCyan},
	plans.NoOp:    {" ", ""},
	plans.Update:  {"~", ansiYellow},
	plans.Replace: {"-/+", ansiMagenta},
	plans.Delete:  {"-", ansiRed},
	plans.Unknown: {"?", ansiRed},
}

// renderPlan prints the plan for people. No-op actions are summarised, not listed, unless they
// carry changes without effect.
func renderPlan(out io.Writer, p *plans.Plan, color bool) {
	// Two writes per action went straight to stdout: 22,000 system calls for 11,000 creates
	// (each a terminal round trip when stdout is one). Buffered, they are a few dozen.
	w := bufio.NewWriterSize(out, 64<<10)
	defer w.Flush()
	paint := func(c, s string) string {
		if !color || c == "" {
			return s
		}
		return c + s + ansiReset
	}
	if len(p.Actions) == 0 {
		fmt.Fprintln(w, "No changes: nothing to create, update or delete.")
		return
	}
	if !p.HasChanges() {
		fmt.Fprintln(w, "No changes. The topology matches the state.")
	} else {
		fmt.Fprintln(w, "sysbox will perform these actions, in this order:")
	}
	fmt.Fprintln(w)
	for _, a := range p.Actions {
		if a.Action == plans.NoOp && len(a.Changes) == 0 {
			continue
		}
		st := actionStyle[a.Action]
		fmt.Fprintf(w, "  %s %s %s\n", paint(st.color, fmt.Sprintf("%3s", st.sym)), paint(ansiBold, a.Address.String()), paint(st.color, string(a.Action)))
		fmt.Fprintf(w, "        # %s\n", a.Reason)
		for _, c := range a.Changes {
			note := ""
			switch c.Effect {
			case plans.ForcesReplacement:
				note = paint(ansiRed, "  # forces replacement")
			case plans.NoEffect:
				note = "  # no effect on the existing object"
			}
			fmt.Fprintf(w, "        ~ %s: %s → %s%s\n", c.Path, compact(c.Before), compact(c.After), note)
		}
	}
	n := p.Counts()
	fmt.Fprintf(w, "\nPlan: %d to create, %d to update, %d to replace, %d to delete, %d to read, %d unknown, %d unchanged.\n",
		n[plans.Create], n[plans.Update], n[plans.Replace], n[plans.Delete], n[plans.Read], n[plans.Unknown], n[plans.NoOp])
	if n[plans.Unknown] > 0 {
		fmt.Fprintln(w, paint(ansiRed, "This plan has unknown actions and cannot be applied: refresh once the objects can be observed."))
	}
}

func compact(b json.RawMessage) string {
	if len(b) == 0 {
		return "(none)"
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return string(b)
	}
	var buf strings.Builder
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	s := strings.TrimSpace(buf.String())
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return strings.ReplaceAll(s, "\n", " ")
}
