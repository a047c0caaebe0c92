package webui

import (
	"bufio"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"zyvor.dev/sysbox/internal/addrs"
	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/handlers"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/ui"
	"zyvor.dev/sysbox/internal/ui/uitest"
)

var ctx = context.Background()

// rig is a view over a real SQLite store holding two projects, each with a project token and
// a workspace; project A's workspace has a run of a three-resource plan claimed by an agent.
type rig struct {
	t                *testing.T
	st               *store.Store
	view             *View
	ts               *httptest.Server
	a, b             store.Project
	tokA, tokB, join string
	admin            string
	wsA, wsB         store.Workspace
	run              store.Run
	agent            string
	epoch            int64
}

// must returns v, or panics on err (a setup step that cannot fail unless the test is broken;
// the panic fails the test with its trace).
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func addr(t *testing.T, s string) addrs.Instance {
	return must(addrs.ParseInstance(s))
}

func action(t *testing.T, a string, act plans.Action, drv string, after any, deps ...string) plans.ResourceAction {
	b := must(json.Marshal(after))
	ra := plans.ResourceAction{Address: addr(t, a), Action: act, Type: addr(t, a).Resource.Type, Mode: "managed", Driver: drv}
	if act == plans.Delete {
		ra.Before = b
	} else {
		ra.After = b
	}
	for _, d := range deps {
		ra.DependsOn = append(ra.DependsOn, addr(t, d))
	}
	return ra
}

// planFile encodes a plan of a network, a node attached to it with a firewall, and a node
// being deleted.
func planFile(t *testing.T) []byte {
	acts := []plans.ResourceAction{
		action(t, "sysbox_firewall.web", plans.Create, "nftables", handlers.FirewallConfig{Driver: "nftables", Node: "sysbox_node.web"}, "sysbox_node.web"),
		action(t, "sysbox_network.lan", plans.Create, "netns", handlers.NetworkConfig{Driver: "netns", IPv4CIDR: "198.51.100.0/24"}),
		action(t, "sysbox_node.old", plans.Delete, "netns", handlers.NodeConfig{Driver: "netns"}),
		action(t, "sysbox_node.web", plans.Create, "netns", handlers.NodeConfig{Driver: "netns",
			Environment: map[string]string{"TOKEN": `env("WEB_TOKEN")`},
			Attachments: map[string]*handlers.Attachment{"lan": {Network: "sysbox_network.lan", IPv4: []string{"198.51.100.10/24"}}}},
			"sysbox_network.lan"),
	}
	p := &plans.Plan{ToolVersion: "test", Mode: "normal", Actions: acts, Fingerprint: plans.Fingerprint{
		SourceDigest: store.Digest([]byte("source")), InputDigest: store.Digest([]byte("input")),
		Lineage: "lin", Serial: 1, ActionsDigest: plans.ActionsDigest(acts),
		Drivers: []driver.Descriptor{{Name: "netns", Version: "1"}}}}
	path := filepath.Join(t.TempDir(), "plan")
	if err := plans.WriteFile(path, p); err != nil {
		t.Fatal(err)
	}
	return must(os.ReadFile(path))
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t}
	r.st = must(store.OpenSQLite(ctx, filepath.Join(t.TempDir(), "cp.db")))
	t.Cleanup(func() { r.st.Close() })
	r.a = must(r.st.CreateProject(ctx, "range-a"))
	r.b = must(r.st.CreateProject(ctx, "range-b"))
	var err error
	if r.tokA, _, err = r.st.CreateToken(ctx, store.TokenProject, r.a.ID, "a"); err != nil {
		t.Fatal(err)
	}
	if r.tokB, _, err = r.st.CreateToken(ctx, store.TokenProject, r.b.ID, "b"); err != nil {
		t.Fatal(err)
	}
	if r.join, _, err = r.st.CreateToken(ctx, store.TokenJoin, r.a.ID, "j"); err != nil {
		t.Fatal(err)
	}
	if r.admin, _, err = r.st.CreateToken(ctx, store.TokenAdmin, "", "root"); err != nil {
		t.Fatal(err)
	}
	r.wsA = must(r.st.CreateWorkspace(ctx, r.a.ID, "lab"))
	r.wsB = must(r.st.CreateWorkspace(ctx, r.b.ID, "other"))
	rev, _, err := r.st.PutRevision(ctx, r.a.ID, []byte(`{"files":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	pl := must(r.st.PutPlan(ctx, r.a.ID, r.wsA.ID, rev.Digest, planFile(t), []string{"driver:netns"}))
	r.run = must(r.st.CreateRun(ctx, r.a.ID, pl.ID, "apply", false))
	ag := must(r.st.CreateAgent(ctx, r.a.ID, "host", make([]byte, ed25519.PublicKeySize), []string{"driver:netns"}))
	l := must(r.st.ClaimRun(ctx, r.a.ID, ag.ID, ag.Capabilities, time.Hour))
	r.agent, r.epoch = ag.ID, l.Epoch
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	r.view = New(r.st, key, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.view.Every = 20 * time.Millisecond
	mux := http.NewServeMux()
	mux.Handle("/ui/", r.view.Handler())
	r.ts = httptest.NewServer(mux)
	t.Cleanup(func() { r.view.Close(); r.ts.Close() })
	return r
}

// progress appends progress lines and projections as the run's agent does.
func (r *rig) progress(lines []string, projs ...store.Projection) {
	r.t.Helper()
	var evs []store.Event
	for _, l := range lines {
		evs = append(evs, store.Event{Kind: "progress", Data: l})
	}
	if len(evs) > 0 {
		if _, err := r.st.AppendEvents(ctx, r.run.ID, r.agent, r.epoch, evs); err != nil {
			r.t.Fatal(err)
		}
	}
	if len(projs) > 0 {
		if err := r.st.PutProjections(ctx, r.run.ID, r.agent, r.epoch, projs); err != nil {
			r.t.Fatal(err)
		}
	}
}

// get requests path with a bearer token (none if empty) and returns status and body.
func (r *rig) get(c *http.Client, path, token string) (int, string, http.Header) {
	r.t.Helper()
	req := must(http.NewRequest("GET", r.ts.URL+path, nil))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp := must(c.Do(req))
	defer resp.Body.Close()
	return resp.StatusCode, string(must(io.ReadAll(resp.Body))), resp.Header
}

func element(t *testing.T, g *ui.Graph, a string) ui.Element {
	t.Helper()
	for _, e := range g.Elements {
		if e.Address == a {
			return e
		}
	}
	t.Fatalf("no element %s in %+v", a, g.Elements)
	return ui.Element{}
}

// TestGraphFromProjectionsAndPlan: the workspace's graph is the plan of its latest run joined
// with its projections: planned but unprojected resources are config-only, a projected one
// takes its observation and external id, the plan's attachments are edges with their
// addresses, and the run's progress lines come along.
func TestGraphFromProjectionsAndPlan(t *testing.T) {
	r := newRig(t)
	r.progress([]string{"sysbox_network.lan: creating", "sysbox_network.lan: created"},
		store.Projection{Address: "sysbox_network.lan", Observation: "present", ExternalID: "sbx-lan"},
		store.Projection{Address: "sysbox_node.old", Observation: "present", ExternalID: "sbx-old", Generation: 3})
	code, body, h := r.get(http.DefaultClient, "/ui/w/"+r.wsA.ID+"/api/graph", r.tokA)
	if code != 200 {
		t.Fatalf("api/graph: got %d %s", code, body)
	}
	var g ui.Graph
	if err := json.Unmarshal([]byte(body), &g); err != nil {
		t.Fatal(err)
	}
	if g.Title != "range-a / lab" || g.Version == "" || h.Get("X-Sysbox-Event-Id") != g.Version {
		t.Errorf("title %q version %q event id %q: want range-a / lab and the version as event id", g.Title, g.Version, h.Get("X-Sysbox-Event-Id"))
	}
	for _, w := range []struct{ addr, obs, diff, ext, driver string }{
		{"sysbox_network.lan", "present", "", "sbx-lan", "netns"},
		{"sysbox_node.web", "absent", ui.DiffConfigOnly, "", "netns"},
		{"sysbox_firewall.web", "absent", ui.DiffConfigOnly, "", "nftables"},
		{"sysbox_node.old", "present", ui.DiffStateOnly, "sbx-old", "netns"},
	} {
		e := element(t, &g, w.addr)
		if e.Observation != w.obs || e.Diff != w.diff || e.ExternalID != w.ext || e.Driver != w.driver {
			t.Errorf("%s: got %s/%q/%q/%s, want %s/%q/%q/%s", w.addr, e.Observation, e.Diff, e.ExternalID, e.Driver, w.obs, w.diff, w.ext, w.driver)
		}
	}
	if e := element(t, &g, "sysbox_node.old"); e.Generation != 3 {
		t.Errorf("sysbox_node.old: generation %d, want the projection's 3", e.Generation)
	}
	if e := element(t, &g, "sysbox_firewall.web"); e.Node != "sysbox_node.web" || e.Kind != ui.KindFirewall {
		t.Errorf("firewall: got kind %s on %q, want firewall on sysbox_node.web", e.Kind, e.Node)
	}
	var att []string
	for _, e := range g.Edges {
		if e.Kind == ui.EdgeAttachment {
			att = append(att, e.Source+">"+e.Target+" "+e.Label)
		}
	}
	if strings.Join(att, ";") != "sysbox_node.web>sysbox_network.lan lan 198.51.100.10/24" {
		t.Errorf("attachment edges: got %q", att)
	}
	if g.Run == nil || g.Run.ID != r.run.ID || g.Run.Status != store.RunRunning || strings.Join(g.Run.Lines, "|") != "sysbox_network.lan: creating|sysbox_network.lan: created" {
		t.Errorf("run: got %+v, want %s running with its two lines", g.Run, r.run.ID)
	}
	// A later run that changes nothing (another kind of run, as remote commands queue) does
	// not replace the plan that shapes the graph, but the panel beside it follows that run.
	other, err := r.st.CreateRun(ctx, r.a.ID, r.run.Plan, "output", false)
	if err != nil {
		t.Fatal(err)
	}
	code, body, _ = r.get(http.DefaultClient, "/ui/w/"+r.wsA.ID+"/api/graph", r.tokA)
	g = ui.Graph{}
	if err := json.Unmarshal([]byte(body), &g); code != 200 || err != nil {
		t.Fatalf("api/graph after another run: %d %v %s", code, err, body)
	}
	if e := element(t, &g, "sysbox_node.web"); e.Diff != ui.DiffConfigOnly {
		t.Errorf("after an output run, sysbox_node.web: diff %q, want the plan's config-only", e.Diff)
	}
	if g.Run == nil || g.Run.ID != other.ID || g.Run.Status != store.RunQueued {
		t.Errorf("run panel after an output run: got %+v, want %s queued", g.Run, other.ID)
	}
}

// TestAccess: the page, its graph and its stream need a session or a token of the
// workspace's project (or an admin's); another project's token sees 404, as if the workspace
// did not exist; a join token, a forged or an expired session see nothing.
func TestAccess(t *testing.T) {
	r := newRig(t)
	pathsA := []string{"/ui/w/" + r.wsA.ID + "/", "/ui/w/" + r.wsA.ID + "/api/graph", "/ui/w/" + r.wsA.ID + "/assets/ui.js"}
	for _, p := range pathsA {
		if code, body, _ := r.get(http.DefaultClient, p, r.tokA); code != 200 {
			t.Errorf("%s with A's token: got %d %s, want 200", p, code, body)
		}
		if code, _, _ := r.get(http.DefaultClient, p, r.admin); code != 200 {
			t.Errorf("%s with the admin token: got %d, want 200", p, code)
		}
		if code, body, _ := r.get(http.DefaultClient, p, r.tokB); code != 404 || strings.Contains(body, "range-a") {
			t.Errorf("%s with B's token: got %d %q, want 404", p, code, body)
		}
		for _, tok := range []string{"", r.join, "sbx_p_not-a-token"} {
			if code, _, _ := r.get(http.DefaultClient, p, tok); code != 401 {
				t.Errorf("%s with token %.6q: got %d, want 401", p, tok, code)
			}
		}
	}
	if code, _, _ := r.get(http.DefaultClient, "/ui/w/no-such-ws/api/graph", r.tokA); code != 404 {
		t.Errorf("unknown workspace: got %d, want 404", code)
	}
	if code, _, _ := r.get(http.DefaultClient, "/ui/w/"+r.wsA.ID+"/api/graph", ""); code != 401 {
		t.Errorf("no credentials: got %d, want 401", code)
	}

	// A browser: ?token= becomes a cookie for /ui/ (no token in it), and the redirect drops it
	// from the address.
	jar := must(cookiejar.New(nil))
	browser := &http.Client{Jar: jar}
	resp := must(browser.Get(r.ts.URL + "/ui/?token=" + r.tokA))
	list := string(must(io.ReadAll(resp.Body)))
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.RawQuery != "" || !strings.Contains(list, `href="w/`+r.wsA.ID+`/"`) || strings.Contains(list, r.wsB.ID) {
		t.Fatalf("login: got %d at %s, list %s; want 200 at /ui/ listing only A's workspace", resp.StatusCode, resp.Request.URL, list)
	}
	cookies := jar.Cookies(must(http.NewRequest("GET", r.ts.URL+"/ui/", nil)).URL)
	if len(cookies) != 1 || strings.Contains(cookies[0].Value, r.tokA) {
		t.Fatalf("session cookies: %v, want one holding no token", cookies)
	}
	if code, _, _ := r.get(browser, "/ui/w/"+r.wsA.ID+"/api/graph", ""); code != 200 {
		t.Errorf("api/graph with the session: got %d, want 200", code)
	}
	if code, _, _ := r.get(browser, "/ui/w/"+r.wsB.ID+"/api/graph", ""); code != 404 {
		t.Errorf("B's workspace with A's session: got %d, want 404", code)
	}
	if code, _, _ := r.get(http.DefaultClient, "/ui/?token="+r.join, ""); code != 401 {
		t.Errorf("login with a join token: got %d, want 401", code)
	}

	// Forged, altered and expired sessions.
	s := session{Kind: store.TokenProject, Project: r.a.ID, Expires: time.Now().Add(time.Hour)}
	_, other, _ := ed25519.GenerateKey(nil)
	good := s.seal(r.view.key)
	altered := session{Kind: store.TokenProject, Project: r.a.ID, Expires: time.Now().Add(48 * time.Hour)}.seal(other)
	expired := session{Kind: store.TokenProject, Project: r.a.ID, Expires: time.Now().Add(-time.Second)}.seal(r.view.key)
	for name, c := range map[string]string{"good": good, "other key": altered, "expired": expired,
		"spliced": strings.Split(altered, ".")[0] + "." + strings.Split(good, ".")[1]} {
		req := must(http.NewRequest("GET", r.ts.URL+"/ui/w/"+r.wsA.ID+"/api/graph", nil))
		req.AddCookie(&http.Cookie{Name: CookieName, Value: c})
		resp := must(http.DefaultClient.Do(req))
		resp.Body.Close()
		if want := map[bool]int{true: 200, false: 401}[name == "good"]; resp.StatusCode != want {
			t.Errorf("session %s: got %d, want %d", name, resp.StatusCode, want)
		}
	}
	// Read only.
	req := must(http.NewRequest("POST", r.ts.URL+"/ui/w/"+r.wsA.ID+"/api/graph", nil))
	req.Header.Set("Authorization", "Bearer "+r.tokA)
	resp = must(http.DefaultClient.Do(req))
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST api/graph: got %d, want 405", resp.StatusCode)
	}
}

type sse = uitest.Event

func next(t *testing.T, rd *bufio.Reader) sse { return uitest.ReadEvent(t, rd) }

func (r *rig) events(c context.Context, last string) *bufio.Reader {
	r.t.Helper()
	req := must(http.NewRequestWithContext(c, "GET", r.ts.URL+"/ui/w/"+r.wsA.ID+"/events", nil))
	req.Header.Set("Authorization", "Bearer "+r.tokA)
	if last != "" {
		req.Header.Set("Last-Event-ID", last)
	}
	resp := must(http.DefaultClient.Do(req))
	r.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		r.t.Fatalf("events: got %d", resp.StatusCode)
	}
	return bufio.NewReader(resp.Body)
}

// until reads events until one satisfies ok (intermediate snapshots may come first).
func until(t *testing.T, rd *bufio.Reader, what string, ok func(sse) bool) sse {
	t.Helper()
	for {
		if ev := next(t, rd); ok(ev) {
			return ev
		} else {
			t.Logf("waiting for %s: event %s", what, ev.ID)
		}
	}
}

func observation(t *testing.T, data, a string) string {
	var g ui.Graph
	if err := json.Unmarshal([]byte(data), &g); err != nil {
		t.Fatal(err)
	}
	return element(t, &g, a).Observation
}

// TestEventsFollowTheStoreAndResume: a projection stored by the run's agent reaches an open
// stream; the event ids are the stored data's version, so a client reconnecting to a new view
// (a restarted server) with the last id it saw gets nothing again until the next change.
func TestEventsFollowTheStoreAndResume(t *testing.T) {
	r := newRig(t)
	c, cancel := context.WithCancel(ctx)
	defer cancel()
	rd := r.events(c, "")
	first := next(t, rd)
	if observation(t, first.Data, "sysbox_node.web") != "absent" {
		t.Fatalf("first event: web is not absent")
	}
	r.progress([]string{"sysbox_node.web: created"}, store.Projection{Address: "sysbox_node.web", Observation: "present", ExternalID: "sbx-web"})
	second := until(t, rd, "web present", func(ev sse) bool { return observation(t, ev.Data, "sysbox_node.web") == "present" })
	if second.ID == first.ID {
		t.Fatalf("after the projection: the id stayed %q", first.ID)
	}

	// A new view over the same store, as after a restart.
	r.view.Close()
	r.view = New(r.st, r.view.key, r.view.log)
	r.view.Every = 20 * time.Millisecond
	mux := http.NewServeMux()
	mux.Handle("/ui/", r.view.Handler())
	r.ts = httptest.NewServer(mux)
	defer r.ts.Close()
	defer r.view.Close()
	rd = r.events(c, second.ID)
	r.progress(nil, store.Projection{Address: "sysbox_firewall.web", Observation: "present", ExternalID: "sbx-fw"})
	third := next(t, rd)
	if third.ID == second.ID {
		t.Fatalf("resumed from %s: the first event repeats it", second.ID)
	}
	if observation(t, third.Data, "sysbox_firewall.web") != "present" {
		until(t, rd, "firewall present", func(ev sse) bool { return observation(t, ev.Data, "sysbox_firewall.web") == "present" })
	}
}

// checkpoints appends checkpoint events as the run's agent sends them.
func (r *rig) checkpoints(cs ...ui.Checkpoint) {
	r.t.Helper()
	var evs []store.Event
	for _, c := range cs {
		evs = append(evs, store.Event{Kind: ui.EventCheckpoint, Data: string(must(json.Marshal(c)))})
	}
	if _, err := r.st.AppendEvents(ctx, r.run.ID, r.agent, r.epoch, evs); err != nil {
		r.t.Fatal(err)
	}
}

func runOf(t *testing.T, data string) *ui.Run {
	t.Helper()
	var g ui.Graph
	if err := json.Unmarshal([]byte(data), &g); err != nil {
		t.Fatal(err)
	}
	if g.Error != "" {
		t.Fatalf("graph error: %s", g.Error)
	}
	return g.Run
}

// TestCheckpointEventsBesideTheGraph: the run's checkpoint events reach an open stream as
// the panel's records, in the order they were stored, beside its progress lines, each new one
// with a new event id; an event that does not decode as a checkpoint is an error naming the
// run and the event, not a silently shorter list.
func TestCheckpointEventsBesideTheGraph(t *testing.T) {
	r := newRig(t)
	// A generous bound: a change that never arrives fails the read instead of hanging.
	c, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rd := r.events(c, "")
	first := next(t, rd)
	if run := runOf(t, first.Data); run == nil || len(run.Checkpoints) != 0 {
		t.Fatalf("first event: run %+v, want the run without checkpoints", run)
	}
	at := time.Date(2026, 12, 2, 7, 0, 0, 0, time.UTC)
	sent := []ui.Checkpoint{
		{Seq: 1, At: at, Record: ui.CheckpointRun, Run: "exec-1"},
		{Seq: 2, At: at.Add(time.Millisecond), Record: ui.CheckpointOp, Address: "sysbox_network.lan", Action: "create", Step: "created"},
	}
	r.checkpoints(sent...)
	r.progress([]string{"sysbox_network.lan: Creating..."})
	second := until(t, rd, "two checkpoints and a line", func(ev sse) bool {
		run := runOf(t, ev.Data)
		return len(run.Checkpoints) == 2 && len(run.Lines) == 1
	})
	if got := runOf(t, second.Data).Checkpoints; !cmp.Equal(got, sent) {
		t.Fatalf("checkpoints: %s", cmp.Diff(sent, got))
	}
	done := ui.Checkpoint{Seq: 3, At: at.Add(2 * time.Millisecond), Record: ui.CheckpointOp, Address: "sysbox_network.lan", Action: "create", Step: "done"}
	r.checkpoints(done)
	third := until(t, rd, "the third checkpoint", func(ev sse) bool { return len(runOf(t, ev.Data).Checkpoints) == 3 })
	if third.ID == second.ID || !cmp.Equal(runOf(t, third.Data).Checkpoints[2], done) {
		t.Fatalf("third event %s (after %s): %+v, want a new id and %+v", third.ID, second.ID, runOf(t, third.Data).Checkpoints, done)
	}

	seqs, err := r.st.AppendEvents(ctx, r.run.ID, r.agent, r.epoch, []store.Event{{Kind: ui.EventCheckpoint, Data: "{not json"}})
	if err != nil || len(seqs) != 1 {
		t.Fatal(seqs, err)
	}
	bad := until(t, rd, "the error", func(ev sse) bool { return strings.Contains(ev.Data, `"error"`) })
	var g ui.Graph
	if err := json.Unmarshal([]byte(bad.Data), &g); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("run %s: event %d: checkpoint", r.run.ID, seqs[0]); !strings.Contains(g.Error, want) {
		t.Fatalf("undecodable checkpoint event: error %q, want %q", g.Error, want)
	}
}
