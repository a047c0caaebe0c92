package webui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"zyvor.dev/sysbox/internal/executor"
	"zyvor.dev/sysbox/internal/executor/failpoint"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/internal/ui/uitest"
)

// stopAt is the checkpoint record the apply stops at: with one operation at a time, past the
// network's operation and into the first node's, whose handle (with its private envelope) is
// then in the log.
const stopAt = 12

// TestLocalUICheckpoints: `sysbox ui` on a real netns lab shows, beside the graph, the
// checkpoint records of an apply in progress exactly as its log holds them (the apply is
// stopped with SIGSTOP right after a checkpoint record became durable, so nothing moves while
// the page is compared with the log), then that the run ended once the apply finished. Nothing
// secret is served meanwhile.
func TestLocalUICheckpoints(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(topology(2)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroyLab(t, dir) })
	ui := start(t, nil, "ui", "--listen", "127.0.0.1:0", "--chdir", dir)
	url := strings.TrimSuffix(strings.TrimPrefix(ui.WaitLine(t, "sysbox ui: serving ", time.Minute), "sysbox ui: serving "), " (Ctrl-C stops)")
	ctx := uitest.Browser(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(url),
		chromedp.WaitVisible(`#run[data-status="none"]`),
		chromedp.WaitVisible(li("sysbox_node.web[0]")+`[data-diff="config-only"]`)); err != nil {
		t.Fatalf("page before the apply: %v", err)
	}

	// The apply, stopped right after its stopAt-th checkpoint record is durable.
	c := exec.Command(binary, "apply", "-auto-approve", "--parallelism", "1", "--no-color", "--chdir", dir)
	c.Env = append(os.Environ(), "WEB_TOKEN="+secret,
		fmt.Sprintf("%s=%s@%d", failpoint.EnvSpec, executor.PointCheckpoint, stopAt), failpoint.EnvAction+"=stop")
	var out strings.Builder
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = c.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		<-exited
	})
	if !testenv.WaitStopped(t, c.Process.Pid, exited) {
		t.Fatalf("the apply exited before checkpoint record %d:\n%s", stopAt, out.String())
	}
	// Another operation's record may follow the stopAt-th before the stop lands (a "done"
	// marker is written without waiting for an fsync, from the state save's callback): the page
	// must show whatever the log holds.
	it, err := executor.ReadLog(filepath.Join(dir, ".sysbox"))
	if err != nil || it == nil || len(it.Records) < stopAt {
		t.Fatalf("the stopped apply's log: %v, %v, want at least %d records", it, err, stopAt)
	}
	var want []string
	for _, r := range it.Records {
		want = append(want, fmt.Sprintf("%d %s %s %s %s", r.Seq, r.Type, r.Address, r.Action, r.Step))
	}
	last := fmt.Sprintf(`#run[data-run=%q][data-status="running"] #checkpoints li[data-checkpoint="%d"]`, it.Header.Run, len(it.Records))
	if err := chromedp.Do(ctx, chromedp.WaitVisible(last)); err != nil {
		t.Fatalf("checkpoint record %d of the stopped apply never shown: %v", len(it.Records), err)
	}
	if got := shownCheckpoints(t, ctx); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("checkpoints beside the graph while the apply is stopped:\n got %q\nwant the log's %q", got, want)
	}
	// Its progress lines (from .sysbox/last-run.jsonl, the apply being another process) too.
	lines, recs, end := lastRun(t, dir)
	if !strings.Contains(strings.Join(lines, "\n"), "sysbox_node.web[0]: Creating...") || end != "" {
		t.Fatalf("the stopped apply's last run file: lines %q, end %q; want web[0] being created and no end", lines, end)
	}
	if got := shownLines(t, ctx); got != strings.Join(lines, "\n") {
		t.Fatalf("progress lines beside the graph while the apply is stopped:\n got %q\nwant the run's %q", got, lines)
	}
	// The stop may land between a record's append and its note in the last run file: the file
	// holds the log's records up to the stopAt-th at least, in the log's order.
	if len(recs) < stopAt || len(recs) > len(want) || strings.Join(recs, "\n") != strings.Join(want[:len(recs)], "\n") {
		t.Fatalf("the last run file's records while stopped:\n got %q\nwant the log's %q (at least %d)", recs, want, stopAt)
	}
	uitest.Screenshot(t, ctx, "ui-apply-stopped-at-checkpoint.png")
	localNoSecrets(t, ctx, url, dir)

	if err := c.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the apply did not finish within 3 minutes of being continued:\n%s", out.String())
	}
	if code := c.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("apply exited %d:\n%s", code, out.String())
	}
	for _, a := range []string{"sysbox_firewall.web", "sysbox_network.lan", "sysbox_node.web[0]", "sysbox_node.web[1]"} {
		if err := chromedp.Do(ctx, chromedp.WaitVisible(li(a)+`[data-observation="present"]`)); err != nil {
			t.Fatalf("%s never present on the page after the apply: %v", a, err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(fmt.Sprintf(`#run[data-run=%q][data-status="ended"]`, it.Header.Run))); err != nil {
		t.Fatalf("the run's end never shown: %v", err)
	}
	// The log is gone; the page lists every record the run wrote (its last run file), those
	// of the stop first and the end last, and every progress line the apply printed.
	lines, recs, end = lastRun(t, dir)
	if end != "complete" || len(recs) <= len(want) || strings.Join(recs[:len(want)], "\n") != strings.Join(want, "\n") ||
		!strings.Contains(recs[len(recs)-1], " end ") {
		t.Fatalf("the ended apply's last run file: end %q, records %q; want complete, the stop's %q first and the end last", end, recs, want)
	}
	for i, r := range recs {
		if !strings.HasPrefix(r, fmt.Sprint(i+1)+" ") {
			t.Fatalf("record %d of the last run file is %q: records missing or repeated", i+1, r)
		}
	}
	if got := shownCheckpoints(t, ctx); strings.Join(got, "\n") != strings.Join(recs, "\n") {
		t.Fatalf("checkpoints after the run ended:\n got %q\nwant all the run wrote %q", got, recs)
	}
	if got := shownLines(t, ctx); got != strings.Join(lines, "\n") || !strings.Contains(got, "sysbox_node.web[1]: Creation complete") {
		t.Fatalf("progress lines after the run ended:\n got %q\nwant the run's %q", got, lines)
	}
	for _, l := range lines {
		if !strings.Contains(out.String(), l+"\n") {
			t.Fatalf("progress line %q of the last run file was not printed by the apply:\n%s", l, out.String())
		}
	}
	uitest.Screenshot(t, ctx, "ui-apply-ended.png")
	localNoSecrets(t, ctx, url, dir)
}

func shownLines(t *testing.T, ctx context.Context) string {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("run-lines").textContent`))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// lastRun reads dir's .sysbox/last-run.jsonl: its progress lines, its checkpoint records in
// the form of shownCheckpoints, and the end's outcome ("" before the end).
func lastRun(t *testing.T, dir string) (lines, recs []string, end string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ".sysbox", "last-run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	type record struct {
		Seq                         uint64
		Type, Address, Action, Step string
	}
	for i, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var ln struct {
			Type, Line, Outcome string
			Record              *record
		}
		if err := json.Unmarshal([]byte(l), &ln); err != nil {
			t.Fatalf("last-run.jsonl line %d: %v", i+1, err)
		}
		switch ln.Type {
		case "progress":
			lines = append(lines, ln.Line)
		case "checkpoint":
			r := ln.Record
			recs = append(recs, fmt.Sprintf("%d %s %s %s %s", r.Seq, r.Type, r.Address, r.Action, r.Step))
		case "end":
			end = ln.Outcome
		}
	}
	// The concurrent workers' hook may append out of Seq order; the page sorts them.
	slices.SortFunc(recs, func(a, b string) int {
		var x, y int
		fmt.Sscan(a, &x)
		fmt.Sscan(b, &y)
		return x - y
	})
	return lines, recs, end
}

func shownCheckpoints(t *testing.T, ctx context.Context) []string {
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#checkpoints li")].map(li =>
  [li.dataset.checkpoint, li.dataset.record, li.dataset.address || "", li.dataset.action || "", li.dataset.step || ""].join(" "))`))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// localNoSecrets greps what `sysbox ui` serves (the page's DOM, /api/graph and the first event
// of /events) for the secret's plaintext and for the namespace inodes that the state and the
// checkpoint log keep in private envelopes.
func localNoSecrets(t *testing.T, ctx context.Context, url, dir string) {
	t.Helper()
	private := []string{secret, "ns_inode"}
	for _, f := range []string{"state", executor.CheckpointFile} {
		b, _ := os.ReadFile(filepath.Join(dir, ".sysbox", f))
		for _, m := range inode.FindAllStringSubmatch(string(b), -1) {
			private = append(private, m[1])
		}
	}
	if len(private) < 3 {
		t.Fatalf("neither the state nor the checkpoint log holds a namespace inode: the grep would prove nothing")
	}
	dom, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	lastRun, err := os.ReadFile(filepath.Join(dir, ".sysbox", "last-run.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]string{"page DOM": dom, "api/graph": get(t, url+"api/graph", false), "last-run.jsonl": string(lastRun)}
	served["events"] = get(t, url+"events", true)
	for where, body := range served {
		for _, p := range private {
			if strings.Contains(body, p) {
				t.Errorf("sysbox ui: %s serves private content %q", where, p)
			}
		}
	}
	if !strings.Contains(served["api/graph"], `"checkpoints"`) || !strings.Contains(served["events"], `"checkpoints"`) {
		t.Fatalf("the served graph holds no checkpoints: the grep proves nothing\n%s", served["api/graph"])
	}
}

// get returns the body of url, or its first event when stream is set.
func get(t *testing.T, url string, stream bool) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var ev strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(ev.String(), "\n\n") {
		n, err := resp.Body.Read(buf)
		ev.Write(buf[:n])
		if err != nil {
			t.Fatalf("events: %v after %q", err, ev.String())
		}
	}
	return ev.String()
}
