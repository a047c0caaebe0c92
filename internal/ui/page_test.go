package ui

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"zyvor.dev/sysbox/internal/ui/uitest"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestPageInChromium loads the page from the real handler in headless chromium: every element
// of the quickstart appears in the DOM with its observation and on the canvas, a click shows
// its details, and a reset arrives through /events without a reload.
func TestPageInChromium(t *testing.T) {
	ctx := uitest.Browser(t)
	lab := newFakeLab(t)
	s := NewServer(Loader(lab.load))
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	defer s.Close() // the page's event stream stays open until then
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()

	const server = `#elements li[data-address="sysbox_node.server"]`
	if err := chromedp.Do(ctx, chromedp.Navigate(ts.URL+"/"),
		chromedp.WaitVisible(chromedp.CSS(server+`[data-observation="present"][data-generation="1"]`))); err != nil {
		t.Fatalf("load page: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#elements li")].map(li => li.dataset.address + " " + li.dataset.observation)`))
	if err != nil {
		t.Fatal(err)
	}
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[int](`sysboxCy.nodes("[kind != 'module']").length`))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, r := range lab.top.Resources {
		want = append(want, r.Addr.String()+" present")
	}
	sort.Strings(want)
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("page elements:\n got %q\nwant %q", got, want)
	}
	if drawn != len(want) {
		t.Errorf("canvas: got %d graph nodes, want %d", drawn, len(want))
	}
	uitest.Screenshot(t, ctx, "ui-present.png")

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(server)),
		chromedp.WaitVisible(chromedp.CSS(`#details[data-address="sysbox_node.server"]`))); err != nil {
		t.Fatalf("click server: %v", err)
	}
	details, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#details")))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"sbx-server", "sysbox reset sysbox_node.server", "dmz 203.0.113.10/24"} {
		if !strings.Contains(details, w) {
			t.Errorf("details of server: missing %q in %q", w, details)
		}
	}

	lab.reset(t, "sysbox_node.server")
	start := time.Now()
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(server+`[data-generation="2"]`))); err != nil {
		t.Fatalf("reset did not reach the page: %v", err)
	}
	// Reported, not asserted: timing depends on the machine.
	t.Logf("reset to page: %v", time.Since(start))
	uitest.Screenshot(t, ctx, "ui-after-reset.png")

	// A refresh that finds the node's process gone records it absent: the page follows.
	lab.observe(t, "sysbox_node.client", substrate.Absent)
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#elements li[data-address="sysbox_node.client"][data-observation="absent"]`))); err != nil {
		t.Fatalf("absent client did not reach the page: %v", err)
	}
	uitest.Screenshot(t, ctx, "ui-client-absent.png")

	// The run panel beside the graph: no run yet, then a run's checkpoint records as they
	// become durable, each arriving without a reload, and the run's end.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#run[data-status="none"]`))); err != nil {
		t.Fatalf("run panel before any run: %v", err)
	}
	if txt, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#run-result"))); err != nil || txt != "No run in progress." {
		t.Fatalf("run panel before any run: %q %v", txt, err)
	}
	at := time.Date(2026, 12, 2, 7, 1, 2, 345e6, time.UTC)
	records := []Checkpoint{
		{At: at, Record: CheckpointRun, Run: "exec-1"},
		{At: at, Record: CheckpointOp, Address: "sysbox_node.server", Action: "replace", Step: "deleted"},
		{At: at, Record: CheckpointOp, Address: "sysbox_node.server", Action: "replace", Step: "created"},
		{At: at, Record: CheckpointOp, Address: "sysbox_node.server", Action: "replace", Step: "done"},
		{At: at, Record: CheckpointEnd},
	}
	for i, c := range records {
		status := "running"
		if c.Record == CheckpointEnd {
			status = "ended"
		}
		lab.checkpoint("exec-1", status, c)
		if err := s.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		sel := fmt.Sprintf(`#run[data-run="exec-1"][data-status=%q] #checkpoints li[data-checkpoint="%d"][data-record=%q]`, status, i+1, c.Record)
		if c.Address != "" {
			sel += fmt.Sprintf(`[data-address=%q][data-action=%q][data-step=%q]`, c.Address, c.Action, c.Step)
		}
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
			t.Fatalf("checkpoint %d (%+v) never shown: %v", i+1, c, err)
		}
		if i == 2 {
			uitest.Screenshot(t, ctx, "ui-checkpoints.png")
		}
	}
	shown, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#checkpoints li")].map(li => li.dataset.checkpoint + " " + li.textContent)`))
	if err != nil {
		t.Fatal(err)
	}
	wantList := []string{"1 07:01:02.345 #1 run exec-1 began", "2 07:01:02.345 #2 sysbox_node.server · replace → deleted",
		"3 07:01:02.345 #3 sysbox_node.server · replace → created", "4 07:01:02.345 #4 sysbox_node.server · replace → done",
		"5 07:01:02.345 #5 run ended"}
	if fmt.Sprint(shown) != fmt.Sprint(wantList) {
		t.Errorf("checkpoint list, newest last:\n got %q\nwant %q", shown, wantList)
	}
}
