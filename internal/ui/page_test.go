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
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
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
}
