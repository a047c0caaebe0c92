// Package uitest drives the web view in headless Debian chromium (github.com/chromedp/chromedp)
// for the page tests of `sysbox ui` and of the control plane's /ui/. Test support: imported
// only by tests.
package uitest

import (
	"bufio"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"zyvor.dev/sysbox/internal/testenv"
)

var screenshotDir = flag.String("screenshots", "", "write page screenshots to `DIR` (default: $SYSBOX_TEST_SCREENSHOTS, else the test's temp dir)")

// Browser starts headless chromium with a throwaway profile; it ends with the test.
func Browser(t *testing.T) context.Context {
	t.Helper()
	bin := testenv.RequireBinary(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 720))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // chromium refuses to sandbox as root
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	// Start the browser now so that a missing or broken chromium fails here, named.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	return ctx
}

// Screenshot writes the page as name (a .png) under -screenshots, $SYSBOX_TEST_SCREENSHOTS or
// the test's temp dir, and logs the path.
func Screenshot(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	dir := *screenshotDir
	if dir == "" {
		dir = os.Getenv("SYSBOX_TEST_SCREENSHOTS")
	}
	if dir == "" {
		dir = t.TempDir()
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", p)
	return p
}

// Event is one Server-Sent Event.
type Event struct{ ID, Name, Data string }

// ReadEvent reads the next event with an id from an event stream (comments skipped).
func ReadEvent(t testing.TB, r *bufio.Reader) Event {
	t.Helper()
	var ev Event
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read event: %v (so far %+v)", err, ev)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && ev.ID != "":
			return ev
		case strings.HasPrefix(line, "id: "):
			ev.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.Name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.Data = line[6:]
		}
	}
}
