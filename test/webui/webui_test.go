// Package webui runs the control plane's web view end to end (kernel tier): the real sysbox
// binary as server and as an agent with the real netns and nftables drivers, a small lab
// applied through runs, and headless chromium reading /ui/ while the runs change the lab.
package webui

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/drivers/nftables"
	"zyvor.dev/sysbox/internal/agent"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/internal/ui/uitest"
)

var binary string

func TestMain(m *testing.M) {
	// A test build: the local view's test stops an apply at a checkpoint (failpoints).
	testenv.MainWithBinary(m, &binary, "zyvor.dev/sysbox/cmd/sysbox", "sysboxtest")
}

// topology is the lab with n web nodes on one network, the first behind a firewall; the nodes
// carry a secret from the environment.
func topology(n int) string {
	return fmt.Sprintf(`
substrate "local" {
  driver "netns" {}
  driver "nftables" {}
  backend "local" { path = ".sysbox/state" }
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}

resource "sysbox_node" "web" {
  count   = %d
  driver  = "netns"
  command = ["sleep", "infinity"]
  environment = {
    TOKEN = env("WEB_TOKEN")
  }
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.${10 + count.index}/24"]
  }
}

resource "sysbox_firewall" "web" {
  node          = sysbox_node.web[0]
  default_input = "drop"
}
`, n)
}

// secret is the plaintext of env("WEB_TOKEN"): the agent's drivers get it, the view never.
const secret = "webui-test-web-token-plaintext"

// start runs sysbox with args; it is killed when the test ends.
func start(t *testing.T, env []string, args ...string) *testenv.Proc {
	t.Helper()
	return testenv.Start(t, append([]string{"WEB_TOKEN=" + secret}, env...), binary, args...)
}

type api struct {
	t          *testing.T
	url, token string
}

// call sends body (JSON, or []byte as is) and decodes the answer into out; want is the status.
func (a api) call(method, path string, body, out any, want int) []byte {
	a.t.Helper()
	var rd io.Reader
	if b, ok := body.([]byte); ok {
		rd = bytes.NewReader(b)
	} else if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, _ := http.NewRequest(method, a.url+path, rd)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		a.t.Fatalf("%s %s: got %d %s, want %d", method, path, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return b
}

type obj struct {
	ID, Token, Digest, Status, Result string
	Created                           time.Time
}

type projection struct {
	Address     string    `json:"address"`
	Observation string    `json:"observation"`
	ExternalID  string    `json:"external_id"`
	Generation  int64     `json:"generation"`
	Updated     time.Time `json:"updated"`
}

// rig: a server, a project with a workspace, another project, and an agent.
type rig struct {
	t                *testing.T
	work, url        string
	user, other      api
	project, ws      string
	agentDir, labDir string
	agentData        string
	agent            *testenv.Proc
}

func newRig(t *testing.T) *rig {
	testenv.RequireRoot(t)
	r := &rig{t: t, work: t.TempDir()}
	srv := start(t, nil, "server", "--data", filepath.Join(r.work, "server"), "--listen", "127.0.0.1:0")
	r.url = "http://" + strings.TrimPrefix(srv.WaitLine(t, "listening on ", time.Minute), "listening on http://")
	tok, err := os.ReadFile(filepath.Join(r.work, "server", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	admin := api{t, r.url, strings.TrimSpace(string(tok))}
	var p, q, user, other, ws, join obj
	admin.call("POST", "/v1/projects", map[string]string{"name": "range"}, &p, 201)
	admin.call("POST", "/v1/projects", map[string]string{"name": "elsewhere"}, &q, 201)
	admin.call("POST", "/v1/projects/"+p.ID+"/tokens", map[string]string{"kind": "project", "name": "ci"}, &user, 201)
	admin.call("POST", "/v1/projects/"+q.ID+"/tokens", map[string]string{"kind": "project", "name": "other"}, &other, 201)
	r.user, r.other, r.project = api{t, r.url, user.Token}, api{t, r.url, other.Token}, p.ID
	r.user.call("POST", "/v1/projects/"+p.ID+"/workspaces", map[string]string{"name": "lab"}, &ws, 201)
	r.ws = ws.ID
	admin.call("POST", "/v1/projects/"+p.ID+"/tokens", map[string]string{"kind": "join", "name": "host"}, &join, 201)

	r.agentData = filepath.Join(r.work, "agent")
	r.agentDir = filepath.Join(r.agentData, "workspaces", r.ws)
	r.labDir = filepath.Join(r.work, "lab")
	// Registered before the agent starts, so it runs after the agent is killed: whatever
	// happened, destroy the lab and check nothing of it is left.
	t.Cleanup(r.destroy)
	r.startAgent("SYSBOX_JOIN_TOKEN=" + join.Token)
	return r
}

// startAgent starts the agent (joining with env's token the first time; later with the
// identity kept in its data directory).
func (r *rig) startAgent(env ...string) {
	r.agent = start(r.t, env, "agent", "--server", r.url, "--data", r.agentData, "--name", "host",
		"--drivers", "netns,nftables", "--poll", "100ms")
	r.agent.WaitLine(r.t, "sysbox agent ", time.Minute)
}

// stopAgent kills the (idle) agent: runs queued meanwhile stay queued.
func (r *rig) stopAgent() {
	r.agent.Cmd.Process.Kill()
	r.agent.Cmd.Wait()
}

func sysbox(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, binary, append(args, "--no-color", "--chdir", dir)...)
	c.Env = append(os.Environ(), "WEB_TOKEN="+secret)
	out, err := c.CombinedOutput()
	return string(out), err
}

func (r *rig) destroy() { destroyLab(r.t, r.agentDir) }

// destroyLab recovers and destroys the lab applied in dir, if any, and checks that nothing of
// it is left.
func destroyLab(t *testing.T, dir string) {
	if _, err := os.Stat(filepath.Join(dir, ".sysbox", "state")); err != nil {
		return // nothing was applied
	}
	lineage := lineageOf(dir)
	if out, err := sysbox(dir, "recover"); err != nil {
		t.Errorf("cleanup recover: %v\n%s", err, out)
	}
	if out, err := sysbox(dir, "destroy", "-auto-approve"); err != nil {
		t.Errorf("cleanup destroy: %v\n%s", err, out)
	}
	reg := driver.NewRegistry()
	nd := netns.New()
	_ = reg.Register(nd)
	for _, a := range []driver.Auditor{nd, nftables.New(reg)} {
		objs, err := a.Residue(context.Background(), lineage)
		if err != nil || len(objs) > 0 {
			t.Errorf("residue after cleanup destroy: %v %v", objs, err)
		}
	}
}

func lineageOf(dir string) string {
	var st struct {
		Lineage string `json:"lineage"`
	}
	b, _ := os.ReadFile(filepath.Join(dir, ".sysbox", "state"))
	_ = json.Unmarshal(b, &st)
	return st.Lineage
}

// queue plans topology(n) against the agent's current state (a copy of it), stores bundle
// and plan and queues an apply run; it returns the run.
func (r *rig) queue(n int) obj {
	t := r.t
	t.Helper()
	os.RemoveAll(r.labDir)
	if err := os.MkdirAll(filepath.Join(r.labDir, ".sysbox"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.labDir, "main.sysbox.hcl"), []byte(topology(n)), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := os.ReadFile(filepath.Join(r.agentDir, ".sysbox", "state")); err == nil {
		if err := os.WriteFile(filepath.Join(r.labDir, ".sysbox", "state"), st, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	planPath := filepath.Join(r.work, fmt.Sprintf("lab-%d.plan", n))
	if out, err := sysbox(r.labDir, "plan", "-out", planPath); err != nil {
		t.Fatalf("plan: %v\n%s", err, out)
	}
	plan, _ := os.ReadFile(planPath)
	bundle, err := agent.PackDir(r.labDir)
	if err != nil {
		t.Fatal(err)
	}
	var rev, pl, run obj
	r.user.call("POST", "/v1/projects/"+r.project+"/revisions", bundle, &rev, 201)
	r.user.call("POST", "/v1/projects/"+r.project+"/workspaces/"+r.ws+"/plans", map[string]any{"revision": rev.Digest, "plan": plan}, &pl, 201)
	r.user.call("POST", "/v1/projects/"+r.project+"/runs", map[string]any{"plan": pl.ID, "op": "apply"}, &run, 201)
	return run
}

func (r *rig) finished(id string) obj {
	r.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var run obj
		r.user.call("GET", "/v1/projects/"+r.project+"/runs/"+id, nil, &run, 200)
		if run.Status == "succeeded" || run.Status == "failed" {
			return run
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("run %s still %s after 90 s", id, run.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *rig) projections() map[string]projection {
	var ps []projection
	r.user.call("GET", "/v1/projects/"+r.project+"/workspaces/"+r.ws+"/projections", nil, &ps, 200)
	out := map[string]projection{}
	for _, p := range ps {
		out[p.Address] = p
	}
	return out
}

func li(addr string) string { return `#elements li[data-address="` + addr + `"]` }

// watch records in the page, per address, when its list entry first appeared and first showed
// present (browser clock, ms since the epoch; the same host as the server).
const watch = `(() => {
  window.sbxFirst = {}; window.sbxPresent = {};
  const note = () => { const now = Date.now();
    for (const li of document.querySelectorAll("#elements li")) {
      const a = li.dataset.address;
      if (!(a in sbxFirst)) sbxFirst[a] = now;
      if (li.dataset.observation === "present" && !(a in sbxPresent)) sbxPresent[a] = now;
    } };
  note();
  new MutationObserver(note).observe(document.getElementById("elements"), { childList: true, subtree: true, attributes: true });
  return true;
})()`

func seen(t *testing.T, ctx context.Context, which string) map[string]float64 {
	t.Helper()
	m, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](which))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ms(at time.Time) float64 { return float64(at.UnixNano()) / 1e6 }

// TestControlPlaneUIInChromium: the page of a workspace at /ui/ follows two apply runs of a
// real netns lab: every element is shown with its projection's observation, the second run's
// new node appears as soon as the run is queued and turns present when its projection is
// stored, and the run's progress lines are beside the graph. Nothing secret is served.
func TestControlPlaneUIInChromium(t *testing.T) {
	r := newRig(t)
	ctx := uitest.Browser(t)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	// Log in with the project token: the list links the workspace; its page starts empty.
	var list string
	if err := chromedp.Do(ctx, chromedp.Navigate(r.url+"/ui/?token="+r.user.token),
		chromedp.WaitVisible(`a[data-workspace="`+r.ws+`"]`)); err != nil {
		t.Fatalf("login and list: %v", err)
	}
	list, err := chromedp.Run(ctx, chromedp.Location())
	if err != nil || strings.Contains(list, "token") {
		t.Fatalf("after login the address is %q (%v), want /ui/ without the token", list, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(`a[data-workspace="`+r.ws+`"]`),
		chromedp.WaitVisible(`#status[data-event-id]:not([data-event-id=""])`)); err != nil {
		t.Fatalf("open workspace page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](watch)); err != nil {
		t.Fatal(err)
	}

	run1 := r.queue(2)
	want1 := []string{"sysbox_firewall.web", "sysbox_network.lan", "sysbox_node.web[0]", "sysbox_node.web[1]"}
	for _, a := range want1 {
		if err := chromedp.Do(ctx, chromedp.WaitVisible(li(a)+`[data-observation="present"]`)); err != nil {
			t.Fatalf("%s never present on the page: %v", a, err)
		}
	}
	if run := r.finished(run1.ID); run.Status != "succeeded" {
		t.Fatalf("run 1: %s (%s)", run.Status, run.Result)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#run[data-run="`+run1.ID+`"][data-status="succeeded"]`)); err != nil {
		t.Fatalf("run 1's status never reached the page: %v", err)
	}
	r.checkPage(ctx, want1)
	checkpointsOf(t, ctx, run1.ID, want1)
	uitest.Screenshot(t, ctx, "cp-ui-applied.png")
	present := seen(t, ctx, "sbxPresent")
	projs := r.projections()
	var lag []string
	for _, a := range want1 {
		lag = append(lag, fmt.Sprintf("%s %.0f ms", a, present[a]-ms(projs[a].Updated)))
	}
	// Reported, not asserted: timing depends on the machine.
	t.Logf("run 1: projection stored → shown present: %s", strings.Join(lag, ", "))

	// A second run adds a node. Queued while no agent is up (so the page cannot skip the
	// state), it shows as config-only; applied, present.
	r.stopAgent()
	run2 := r.queue(3)
	const added = "sysbox_node.web[2]"
	if err := chromedp.Do(ctx, chromedp.WaitVisible(li(added)+`[data-diff="config-only"][data-observation="absent"]`)); err != nil {
		t.Fatalf("%s of the queued run never shown: %v", added, err)
	}
	uitest.Screenshot(t, ctx, "cp-ui-run2-queued.png")
	r.startAgent()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(li(added)+`[data-observation="present"]`)); err != nil {
		t.Fatalf("%s never present on the page: %v", added, err)
	}
	if run := r.finished(run2.ID); run.Status != "succeeded" {
		t.Fatalf("run 2: %s (%s)", run.Status, run.Result)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#run[data-run="`+run2.ID+`"][data-status="succeeded"]`)); err != nil {
		t.Fatalf("run 2's status never reached the page: %v", err)
	}
	r.checkPage(ctx, append(want1, added))
	uitest.Screenshot(t, ctx, "cp-ui-after-run2.png")
	first, present := seen(t, ctx, "sbxFirst"), seen(t, ctx, "sbxPresent")
	t.Logf("run 2: queued → %s shown %.0f ms; projection stored → shown present %.0f ms", added,
		first[added]-ms(run2.Created), present[added]-ms(r.projections()[added].Updated))

	// A reset run of web[1] (a remote command on the lab's revision): the page shows the node's
	// new generation once its projection is stored.
	const node = "sysbox_node.web[1]"
	gen := r.projections()[node].Generation
	watchFor(t, ctx, node, "generation", fmt.Sprint(gen+1))
	reset := r.command("reset", "--", node)
	if err := chromedp.Do(ctx, chromedp.WaitVisible(li(node)+fmt.Sprintf(`[data-generation="%d"][data-observation="present"]`, gen+1))); err != nil {
		t.Fatalf("%s's generation %d never reached the page: %v", node, gen+1, err)
	}
	if run := r.finished(reset.ID); run.Status != "succeeded" {
		t.Fatalf("reset run: %s (%s)", run.Status, run.Result)
	}
	checkpointsOf(t, ctx, reset.ID, []string{node})
	uitest.Screenshot(t, ctx, "cp-ui-after-reset.png")
	p := r.projections()[node]
	if p.Generation != gen+1 {
		t.Fatalf("%s: projection at generation %d after the reset, want %d", node, p.Generation, gen+1)
	}
	at := seen(t, ctx, "sbxAt")
	// Reported, not asserted: timing depends on the machine.
	t.Logf("reset: projection stored → new generation shown %.0f ms", at[node+" generation"]-ms(p.Updated))

	// Its process killed out of band, a refresh run records the node degraded: the page follows.
	killNode(t, p.ExternalID)
	watchFor(t, ctx, node, "observation", "degraded")
	refresh := r.command("refresh")
	if err := chromedp.Do(ctx, chromedp.WaitVisible(li(node)+`[data-observation="degraded"]`)); err != nil {
		t.Fatalf("%s never shown degraded after its process was killed and a refresh: %v", node, err)
	}
	if run := r.finished(refresh.ID); run.Status != "succeeded" {
		t.Fatalf("refresh run: %s (%s)", run.Status, run.Result)
	}
	// The panel beside the graph follows the latest run, a command run too.
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#run[data-run="`+refresh.ID+`"][data-status="succeeded"]`)); err != nil {
		t.Fatalf("the refresh run never showed beside the graph: %v", err)
	}
	uitest.Screenshot(t, ctx, "cp-ui-killed-refreshed.png")
	p = r.projections()[node]
	if p.Observation != "degraded" {
		t.Fatalf("%s: projection %s after the kill and refresh, want degraded", node, p.Observation)
	}
	at = seen(t, ctx, "sbxAt")
	t.Logf("refresh: projection stored → degraded shown %.0f ms", at[node+" observation"]-ms(p.Updated))

	// Another project's token sees nothing of this workspace.
	for _, p := range []string{"/", "/api/graph", "/events"} {
		r.other.call("GET", "/ui/w/"+r.ws+p, nil, nil, 404)
	}
	r.noSecrets(ctx)
}

// checkpointsOf waits until the panel beside the graph shows run id's checkpoint records up to
// the end record (the agent sends them all before it completes the run), and checks them: the
// executor's run header first, each of addrs's operations done, the end last.
func checkpointsOf(t *testing.T, ctx context.Context, id string, addrs []string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.WaitVisible(`#run[data-run="`+id+`"] #checkpoints li[data-record="end"]`)); err != nil {
		t.Fatalf("run %s: the end checkpoint never shown: %v", id, err)
	}
	got := shownCheckpoints(t, ctx)
	if len(got) < 2 || !strings.HasPrefix(got[0], "1 run ") || !strings.Contains(got[len(got)-1], " end ") {
		t.Fatalf("run %s checkpoints: %q, want the run header first and the end last", id, got)
	}
	for _, a := range addrs {
		found := false
		for _, g := range got {
			f := strings.Fields(g)
			found = found || (len(f) == 5 && f[1] == "op" && f[2] == a && f[4] == "done")
		}
		if !found {
			t.Errorf("run %s checkpoints: no record of %s done in %q", id, a, got)
		}
	}
}

// command queues op with args as a remote command run on the lab directory's topology (the
// one the last queue planned), as `sysbox OP --remote` does.
func (r *rig) command(op string, args ...string) obj {
	r.t.Helper()
	bundle, err := agent.PackDir(r.labDir)
	if err != nil {
		r.t.Fatal(err)
	}
	var rev, run obj
	// The last queue stored this same bundle: revisions are content-addressed, so 200.
	r.user.call("POST", "/v1/projects/"+r.project+"/revisions", bundle, &rev, 200)
	r.user.call("POST", "/v1/projects/"+r.project+"/runs", map[string]any{"op": op, "workspace": r.ws,
		"revision": rev.Digest, "args": args, "sticky": true}, &run, 201)
	return run
}

// watchFor records in the page (window.sbxAt["ADDR ATTR"], browser clock in ms) when the
// list entry of addr first carries data-ATTR=value.
func watchFor(t *testing.T, ctx context.Context, addr, attr, value string) {
	t.Helper()
	js := fmt.Sprintf(`(() => {
  window.sbxAt = window.sbxAt || {};
  const addr = %q, attr = %q, value = %q, key = addr + " " + attr;
  const note = () => {
    if (key in sbxAt) return;
    for (const li of document.querySelectorAll("#elements li"))
      if (li.dataset.address === addr && li.dataset[attr] === value) { sbxAt[key] = Date.now(); return; }
  };
  note();
  new MutationObserver(note).observe(document.getElementById("elements"), { childList: true, subtree: true, attributes: true });
  return true;
})()`, addr, attr, value)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js)); err != nil {
		t.Fatal(err)
	}
}

// killNode kills, out of band, every process in the netns node's namespace (its main process
// "sleep infinity"): the namespace stays, so the driver observes the node degraded.
func killNode(t *testing.T, netnsName string) {
	t.Helper()
	var ns syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/run/netns", netnsName), &ns); err != nil {
		t.Fatalf("node namespace %s: %v", netnsName, err)
	}
	pids, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	killed := 0
	for _, p := range pids {
		var st syscall.Stat_t
		if syscall.Stat(p, &st) != nil || st.Ino != ns.Ino {
			continue
		}
		pid, err := strconv.Atoi(strings.Split(p, "/")[2])
		if err != nil {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed++
		}
	}
	if killed == 0 {
		t.Fatalf("no process holds namespace %s to kill", netnsName)
	}
}

// checkPage compares the page's list and canvas with the projections: every element, with
// its projection's observation and external id, no difference marked, attachments drawn.
func (r *rig) checkPage(ctx context.Context, want []string) {
	t := r.t
	t.Helper()
	got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#elements li")].map(li => li.dataset.address + " " + li.dataset.observation + " " + (li.dataset.diff || "-"))`))
	if err != nil {
		t.Fatal(err)
	}
	projs := r.projections()
	var exp []string
	for _, a := range want {
		exp = append(exp, a+" "+projs[a].Observation+" -")
	}
	sort.Strings(got)
	sort.Strings(exp)
	if strings.Join(got, "\n") != strings.Join(exp, "\n") {
		t.Fatalf("page elements:\n got %q\nwant %q", got, exp)
	}
	drawn, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`sysboxCy.nodes("[kind != 'module']").map(n => n.id() + " " + n.data("observation")).concat(sysboxCy.edges("[kind = 'attachment']").map(e => e.data("label")))`))
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(drawn, "\n")
	for _, e := range exp {
		if a, obs, _ := strings.Cut(strings.TrimSuffix(e, " -"), " "); !strings.Contains(joined, a+" "+obs) {
			t.Errorf("canvas lacks %s %s:\n%s", a, obs, joined)
		}
	}
	if !strings.Contains(joined, "lan 198.51.100.10/24") {
		t.Errorf("canvas lacks the attachment label of web[0]:\n%s", joined)
	}
	// Clicking a node shows its external id from the projection and the run's lines show.
	if err := chromedp.Do(ctx, chromedp.Click(li("sysbox_node.web[0]")),
		chromedp.WaitVisible(`#details[data-address="sysbox_node.web[0]"]`)); err != nil {
		t.Fatal(err)
	}
	details, err := chromedp.Run(ctx, chromedp.Text("#details"))
	if err != nil {
		t.Fatal(err)
	}
	if ext := projs["sysbox_node.web[0]"].ExternalID; ext == "" || !strings.Contains(details, ext) {
		t.Errorf("details of web[0] lack its external id %q: %s", ext, details)
	}
	lines, err := chromedp.Run(ctx, chromedp.Text("#run-lines"))
	if err != nil || !strings.Contains(lines, "Apply complete") {
		t.Errorf("run lines beside the graph: %v %q, want the apply's progress", err, lines)
	}
}

var inode = regexp.MustCompile(`"ns_inode":\s*(\d+)`)

// noSecrets reads everything the view serves (the list, the page's DOM, /api/graph, the
// first event of /events) and greps it for the secret's plaintext and for the private
// envelopes' content (the namespaces' inode numbers the netns driver keeps there).
func (r *rig) noSecrets(ctx context.Context) {
	t := r.t
	t.Helper()
	st, err := os.ReadFile(filepath.Join(r.agentDir, ".sysbox", "state"))
	if err != nil {
		t.Fatal(err)
	}
	private := []string{secret, "ns_inode"}
	for _, m := range inode.FindAllStringSubmatch(string(st), -1) {
		private = append(private, m[1])
	}
	if len(private) < 5 {
		t.Fatalf("the agent's state holds %d namespace inodes; the grep would prove nothing:\n%s", len(private)-2, st)
	}
	dom, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]string{"page DOM": dom}
	served["workspace list"] = string(r.user.call("GET", "/ui/", nil, nil, 200))
	served["api/graph"] = string(r.user.call("GET", "/ui/w/"+r.ws+"/api/graph", nil, nil, 200))
	req, _ := http.NewRequest("GET", r.url+"/ui/w/"+r.ws+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+r.user.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(resp.Body)
	var ev strings.Builder
	for !strings.HasSuffix(ev.String(), "\n\n") {
		l, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		ev.WriteString(l)
	}
	resp.Body.Close()
	served["events"] = ev.String()
	for where, body := range served {
		for _, p := range private {
			if strings.Contains(body, p) {
				t.Errorf("%s serves private content %q", where, p)
			}
		}
	}
	// The grep looked at the right bytes: the graph holds the secret's reference.
	if !strings.Contains(served["api/graph"], "WEB_TOKEN") || !strings.Contains(served["events"], "WEB_TOKEN") {
		t.Fatalf("the served graph lacks the node's environment reference: the grep proves nothing\n%s", served["api/graph"])
	}
}
