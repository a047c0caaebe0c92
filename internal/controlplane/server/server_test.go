package server

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"zyvor.dev/sysbox/internal/controlplane/client"
	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/store/storetest"
	"zyvor.dev/sysbox/internal/controlplane/wire"
	"zyvor.dev/sysbox/internal/plans"
	"zyvor.dev/sysbox/internal/testenv"
)

func testOpenAPIDocumentServed(t *testing.T, e *env) {
	code, b := e.do("GET", "/v1/openapi.json", "", nil)
	if code != 200 {
		t.Fatalf("got %d, want 200", code)
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	// Every route the server registers is in the document, and the reverse.
	var routes []string
	for p, ops := range doc.Paths {
		for m := range ops {
			if m != "parameters" {
				routes = append(routes, strings.ToUpper(m)+" "+p)
			}
		}
	}
	slices.Sort(routes)
	served := e.srv.Routes()
	if !slices.Equal(routes, served) {
		t.Fatalf("document routes %v\nserved routes   %v", routes, served)
	}
}

func testAdminTokenWrittenAtFirstStart(t *testing.T, e *env) {
	path := filepath.Join(e.dir, AdminTokenFile)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("got mode %v, want 0600", fi.Mode().Perm())
	}
	if !strings.HasPrefix(e.admin, store.TokenPrefix) {
		t.Fatalf("admin token %q lacks the prefix %s", e.admin, store.TokenPrefix)
	}
	// A restart keeps the token.
	if _, err := Bootstrap(ctx, e.st, e.dir); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if strings.TrimSpace(string(b)) != e.admin {
		t.Fatal("a second start replaced the admin token")
	}
	e.want(200, "GET", "/v1/projects", e.admin, nil, nil)
}

func testTokensScopeProjects(t *testing.T, e *env) {
	pa, ta, wa := e.project("red")
	pb, tb, _ := e.project("blue")
	run := e.queue(pa, ta, wa, "netns")

	var ps []store.Project
	e.want(200, "GET", "/v1/projects", tb, nil, &ps)
	if len(ps) != 1 || ps[0].ID != pb {
		t.Fatalf("blue's token lists %+v, want only blue", ps)
	}
	e.want(200, "GET", "/v1/projects", e.admin, nil, &ps)
	if len(ps) != 2 {
		t.Fatalf("admin lists %d projects, want 2", len(ps))
	}
	for _, path := range []string{
		"/v1/projects/" + pa + "/workspaces",
		"/v1/projects/" + pa + "/workspaces/" + wa,
		"/v1/projects/" + pa + "/workspaces/" + wa + "/projections",
		"/v1/projects/" + pa + "/runs/" + run.ID,
		"/v1/projects/" + pa + "/runs/" + run.ID + "/events",
		"/v1/projects/" + pa + "/agents",
		// red's objects under blue's own project are not found either
		"/v1/projects/" + pb + "/workspaces/" + wa,
		"/v1/projects/" + pb + "/runs/" + run.ID,
	} {
		e.want(404, "GET", path, tb, nil, nil)
	}
	e.want(404, "POST", "/v1/projects/"+pa+"/workspaces", tb, map[string]string{"name": "x"}, nil)
	e.want(404, "POST", "/v1/projects/"+pa+"/tokens", tb, map[string]string{"kind": "project", "name": "x"}, nil)
	e.want(404, "POST", "/v1/projects/"+pb+"/runs", tb, map[string]any{"plan": run.Plan, "op": "apply"}, nil)
	e.want(403, "POST", "/v1/projects", ta, map[string]string{"name": "mine"}, nil)
	e.want(401, "GET", "/v1/projects", "", nil, nil)
	e.want(401, "GET", "/v1/projects", ta+"x", nil, nil)
	e.want(200, "GET", "/v1/projects/"+pa+"/runs/"+run.ID, ta, nil, nil)
	e.want(400, "POST", "/v1/projects/"+pa+"/workspaces/"+wa+"/plans", ta, map[string]any{"revision": run.Plan, "plan": []byte("not a plan")}, nil)
	e.want(400, "POST", "/v1/projects/"+pa+"/workspaces/"+wa+"/plans", ta, map[string]any{"plan": planFile(t, "netns")}, nil)
	if strings.Contains(e.log.String(), tb) || strings.Contains(e.log.String(), ta) {
		t.Fatal("the log holds a token")
	}
}

func testRevisionsContentAddressed(t *testing.T, e *env) {
	p, tok, _ := e.project("red")
	var r1, r2 store.Revision
	e.want(201, "POST", "/v1/projects/"+p+"/revisions", tok, []byte("bundle"), &r1)
	e.want(200, "POST", "/v1/projects/"+p+"/revisions", tok, []byte("bundle"), &r2)
	if r1.Digest != r2.Digest || r1.Digest != store.Digest([]byte("bundle")) {
		t.Fatalf("got %s and %s, want both %s", r1.Digest, r2.Digest, store.Digest([]byte("bundle")))
	}
}

func testAgentRunLifecycle(t *testing.T, e *env) {
	p, tok, ws := e.project("red")
	nsOnly := e.join(p, "ns-host", "driver:netns", "nftables")
	docker := e.join(p, "docker-host", "driver:netns", "driver:docker", "docker-socket")
	run := e.queue(p, tok, ws, "netns", "docker")
	if !slices.Equal(run.Requires, []string{"driver:docker", "driver:netns"}) {
		t.Fatalf("run requires %v, want the plan's drivers", run.Requires)
	}
	if err := nsOnly.Heartbeat(ctx, []string{"driver:netns", "nftables"}); err != nil {
		t.Fatal(err)
	}
	if l, err := nsOnly.Claim(ctx); err != nil || l != nil {
		t.Fatalf("netns-only agent claiming a docker run: got %+v, %v; want nothing", l, err)
	}
	l, err := docker.Claim(ctx)
	if err != nil || l == nil || l.Run.ID != run.ID || l.Epoch != 1 || l.TTLSeconds != e.srv.LeaseTTL.Seconds() {
		t.Fatalf("docker agent: got %+v, %v; want run %s at epoch 1 with the server's TTL %v", l, err, run.ID, e.srv.LeaseTTL)
	}
	plan, err := docker.Plan(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plans.Decode(plan); err != nil || store.Digest(plan) != e.planDigest(p, run) {
		t.Fatalf("plan fetched by the agent: %v, digest %s; want the stored plan file", err, store.Digest(plan))
	}
	if _, err := nsOnly.Plan(ctx, &client.Lease{Run: l.Run, Epoch: l.Epoch}); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("another agent fetching the plan: got %v, want fenced", err)
	}
	if bundle, err := docker.Revision(ctx, l); err != nil || store.Digest(bundle) != e.revisionOf(p, run) {
		t.Fatalf("revision fetched by the agent: %v, digest %s; want the plan's revision", err, store.Digest(bundle))
	}
	if err := docker.Renew(ctx, l); err != nil {
		t.Fatal(err)
	}
	seqs, err := docker.Events(ctx, l, client.Event{Kind: "progress", Data: "netns.a: creating"}, client.Event{Kind: "progress", Data: "netns.a: created"})
	if err != nil || !slices.Equal(seqs, []int64{1, 2}) {
		t.Fatalf("events: got %v, %v; want [1 2]", seqs, err)
	}
	if err := docker.Projections(ctx, l, client.Projection{Address: "netns.a", Observation: "present", ExternalID: "sbx-a"}); err != nil {
		t.Fatal(err)
	}
	if err := docker.Complete(ctx, l, "succeeded", "1 created", 0); err != nil {
		t.Fatal(err)
	}
	var got store.Run
	e.want(200, "GET", "/v1/projects/"+p+"/runs/"+run.ID, tok, nil, &got)
	if got.Status != "succeeded" || got.Agent != docker.ID {
		t.Fatalf("got run %+v, want succeeded by %s", got, docker.ID)
	}
	var evs []store.Event
	e.want(200, "GET", "/v1/projects/"+p+"/runs/"+run.ID+"/events?after=1", tok, nil, &evs)
	if len(evs) != 1 || evs[0].Seq != 2 || evs[0].Data != "netns.a: created" {
		t.Fatalf("events after 1: got %+v", evs)
	}
	var projs []store.Projection
	e.want(200, "GET", "/v1/projects/"+p+"/workspaces/"+ws+"/projections", tok, nil, &projs)
	if len(projs) != 1 || projs[0].ExternalID != "sbx-a" {
		t.Fatalf("projections: got %+v", projs)
	}
	var agents []store.Agent
	e.want(200, "GET", "/v1/projects/"+p+"/agents", tok, nil, &agents)
	if len(agents) != 2 {
		t.Fatalf("got %d agents, want 2", len(agents))
	}
	code, b := e.do("GET", "/metrics", "", nil)
	if code != 200 || !strings.Contains(string(b), "sysbox_cp_runs_claimed_total 1") || !strings.Contains(string(b), "sysbox_cp_events_ingested_total 2") {
		t.Fatalf("metrics (%d) lack the claim and the two events:\n%s", code, b)
	}
}

func testZombieAgentFenced(t *testing.T, e *env) {
	p, tok, ws := e.project("red")
	a := e.join(p, "a", "driver:netns")
	b := e.join(p, "b", "driver:netns")
	run := e.queue(p, tok, ws, "netns")
	la, err := a.Claim(ctx)
	if err != nil || la == nil {
		t.Fatalf("a claims: %+v, %v", la, err)
	}
	if _, err := a.Events(ctx, la, client.Event{Kind: "progress", Data: "a before pause"}); err != nil {
		t.Fatal(err)
	}
	// a is paused (SIGSTOP) past its lease; b claims the run.
	e.clock.Advance(e.srv.LeaseTTL + time.Second)
	lb, err := b.Claim(ctx)
	if err != nil || lb == nil || lb.Run.ID != run.ID || lb.Epoch != la.Epoch+1 {
		t.Fatalf("b claims after the lapse: %+v, %v; want run %s at epoch %d", lb, err, run.ID, la.Epoch+1)
	}
	// a wakes up: every write under its old epoch is refused.
	if _, err := a.Events(ctx, la, client.Event{Kind: "progress", Data: "zombie"}); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("zombie event: got %v, want fenced", err)
	}
	if err := a.Projections(ctx, la, client.Projection{Address: "netns.a", Observation: "absent"}); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("zombie projection: got %v, want fenced", err)
	}
	if err := a.Renew(ctx, la); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("zombie renewal: got %v, want fenced", err)
	}
	if err := a.Complete(ctx, la, "failed", "zombie", 1); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("zombie completion: got %v, want fenced", err)
	}
	// a forging b's epoch is refused too (the lease names its holder).
	if _, err := a.Events(ctx, &client.Lease{Run: la.Run, Epoch: lb.Epoch}, client.Event{Kind: "progress", Data: "forged"}); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("a writing under b's epoch: got %v, want fenced", err)
	}
	if _, err := b.Events(ctx, lb, client.Event{Kind: "progress", Data: "b resumes"}); err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	e.want(200, "GET", "/v1/projects/"+p+"/runs/"+run.ID+"/events", tok, nil, &evs)
	var data []string
	for _, ev := range evs {
		data = append(data, ev.Data)
	}
	if !slices.Equal(data, []string{"a before pause", "b resumes"}) {
		t.Fatalf("got events %q, want a's before the pause and b's only", data)
	}
	if n := strings.Count(e.log.String(), "fenced write refused"); n != 5 {
		t.Fatalf("got %d fenced refusals logged, want 5:\n%s", n, e.log.String())
	}
}

// raw sends a signed agent request built by hand, so a test can break one part of it.
func raw(t *testing.T, e *env, m wire.Message, key ed25519.PrivateKey, mutate func(*http.Request)) int {
	t.Helper()
	req, err := http.NewRequest(m.Method, e.ts.URL+m.Path, bytes.NewReader(m.Body))
	if err != nil {
		t.Fatal(err)
	}
	wire.Sign(req.Header, m, key)
	if mutate != nil {
		mutate(req)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func testAgentAuthenticationFailures(t *testing.T, e *env) {
	p, _, _ := e.project("red")
	a := e.join(p, "a", "driver:netns")
	revoked := e.join(p, "r", "driver:netns")
	e.want(204, "POST", "/v1/projects/"+p+"/agents/"+revoked.ID+"/revoke", e.admin, nil, nil)
	_, stranger, _ := ed25519.GenerateKey(nil)
	now := time.Now()
	msg := func(agent string) wire.Message {
		return wire.Message{Domain: wire.DomainRequest, Method: "POST", Path: "/v1/agent/heartbeat", Body: []byte(`{"capabilities":[]}`),
			Timestamp: now.Unix(), Nonce: wire.NewNonce(), Agent: agent}
	}
	// A valid request first: the cases below differ from it in one part each.
	if code := raw(t, e, msg(a.ID), a.Key, nil); code != 204 {
		t.Fatalf("valid heartbeat: got %d, want 204", code)
	}
	replayed := msg(a.ID)
	if code := raw(t, e, replayed, a.Key, nil); code != 204 {
		t.Fatalf("first send: got %d, want 204", code)
	}
	joinTok := e.joinToken(p)
	joinBody, _ := json.Marshal(map[string]any{"token": joinTok, "name": "thief", "public_key": []byte(a.Key.Public().(ed25519.PublicKey)), "capabilities": []string{}})
	for _, tc := range []struct {
		class  string
		m      wire.Message
		key    ed25519.PrivateKey
		mutate func(*http.Request)
	}{
		{"replay", replayed, a.Key, nil},
		{"stale-timestamp", func() wire.Message { m := msg(a.ID); m.Timestamp = now.Add(-2 * wire.MaxSkew).Unix(); return m }(), a.Key, nil},
		{"stale-timestamp", func() wire.Message { m := msg(a.ID); m.Timestamp = now.Add(2 * wire.MaxSkew).Unix(); return m }(), a.Key, nil},
		{"unknown-agent", msg("agt_nobody"), stranger, nil},
		{"bad-signature", msg(a.ID), stranger, nil}, // a's id, another key
		{"bad-signature", msg(a.ID), a.Key, func(r *http.Request) { // body changed after signing
			r.Body = io.NopCloser(strings.NewReader(`{"capabilities":["kvm"]}`))
			r.ContentLength = -1
		}},
		{"bad-signature", msg(a.ID), a.Key, func(r *http.Request) { r.Header.Set(wire.HeaderEpoch, "7") }},
		{"revoked", msg(revoked.ID), revoked.Key, nil},
		{"malformed", msg(a.ID), a.Key, func(r *http.Request) { r.Header.Del(wire.HeaderSignature) }},
		// join signed by a key other than the one registered: no proof of possession
		{"bad-signature", wire.Message{Domain: wire.DomainRequest, Method: "POST", Path: "/v1/agents/join", Body: joinBody,
			Timestamp: now.Unix(), Nonce: wire.NewNonce(), Agent: wire.JoinAgentID}, stranger, nil},
	} {
		before := strings.Count(e.log.String(), "class="+tc.class)
		if code := raw(t, e, tc.m, tc.key, tc.mutate); code != 401 {
			t.Errorf("%s: got %d, want 401", tc.class, code)
		}
		if after := strings.Count(e.log.String(), "class="+tc.class); after != before+1 {
			t.Errorf("%s: refusal not logged with its class", tc.class)
		}
	}
	// The join token survived the refused join; used once, it is refused the second time.
	_, key, _ := ed25519.GenerateKey(nil)
	if _, err := client.Join(ctx, e.ts.URL, e.hc, joinTok, "late", key, nil); err != nil {
		t.Fatalf("join with the unused token: %v", err)
	}
	if _, err := client.Join(ctx, e.ts.URL, e.hc, joinTok, "again", key, nil); err == nil {
		t.Fatal("second join with a one-time token: got nil error")
	}
	if !strings.Contains(e.log.String(), "class=join-token-reused") {
		t.Fatal("reused join token not logged")
	}
	code, b := e.do("GET", "/metrics", "", nil)
	if code != 200 || !strings.Contains(string(b), `sysbox_cp_agent_refused_total{reason="replay"} 1`) {
		t.Fatalf("metrics lack the replay refusal:\n%s", b)
	}
}

func testAnswersSignedByServer(t *testing.T, e *env) {
	p, _, _ := e.project("red")
	a := e.join(p, "a", "driver:netns")
	// An agent pinned to another server key refuses the answer.
	other, _, _ := ed25519.GenerateKey(nil)
	forged := *a
	forged.ServerKey = other
	if err := forged.Heartbeat(ctx, nil); !errors.Is(err, client.ErrUnsignedAnswer) {
		t.Fatalf("answer checked against the wrong key: got %v, want %v", err, client.ErrUnsignedAnswer)
	}
	if err := a.Heartbeat(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestNoSecretInDatabaseOrLog(t *testing.T) {
	e := newEnv(t, sqliteStore)
	p, tok, ws := e.project("red")
	ag := e.join(p, "a", "driver:netns")
	e.queue(p, tok, ws, "netns")
	l, err := ag.Claim(ctx)
	if err != nil || l == nil {
		t.Fatal(l, err)
	}
	if _, err := ag.Events(ctx, l, client.Event{Kind: "progress", Data: "x"}); err != nil {
		t.Fatal(err)
	}
	e.st.DB().Exec(`PRAGMA wal_checkpoint(TRUNCATE)`)
	var blobs [][]byte
	for _, f := range []string{"cp.db", "cp.db-wal"} {
		if b, err := os.ReadFile(filepath.Join(e.dir, f)); err == nil {
			blobs = append(blobs, b)
		}
	}
	blobs = append(blobs, []byte(e.log.String()))
	if len(e.tokens) < 3 {
		t.Fatalf("only %d tokens to look for", len(e.tokens))
	}
	for _, b := range blobs {
		for _, secret := range append(e.tokens, string(ag.Key.Seed())) {
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("database or log holds a secret (%d bytes)", len(secret))
			}
		}
	}
	// The hashes are there (the check looks at the right bytes).
	if !bytes.Contains(blobs[0], []byte(store.HashToken(tok))) {
		t.Fatal("the database file does not hold the project token's hash: the grep looked at the wrong bytes")
	}
}

// cases run on every database the server supports.
var cases = []struct {
	name string
	fn   func(t *testing.T, e *env)
}{
	{"OpenAPIDocumentServed", testOpenAPIDocumentServed},
	{"AdminTokenWrittenAtFirstStart", testAdminTokenWrittenAtFirstStart},
	{"TokensScopeProjects", testTokensScopeProjects},
	{"RevisionsContentAddressed", testRevisionsContentAddressed},
	{"AgentRunLifecycle", testAgentRunLifecycle},
	{"ZombieAgentFenced", testZombieAgentFenced},
	{"AgentAuthenticationFailures", testAgentAuthenticationFailures},
	{"AnswersSignedByServer", testAnswersSignedByServer},
	{"LongPolls", testLongPolls},
	{"LapsedLeaseReadsNothing", testLapsedLeaseReadsNothing},
	{"ManyConcurrentClaimers", testManyConcurrentClaimers},
	{"RevokedAgentsWorkspace", testRevokedAgentsWorkspace},
}

func TestServerSQLite(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newEnv(t, sqliteStore)) })
	}
}

// TestServerPostgres runs the same cases on PostgreSQL (daemon tier), each in a fresh schema.
func TestServerPostgres(t *testing.T) {
	dsn := testenv.RequireEnv(t, "SYSBOX_TEST_PG_DSN")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := storetest.PostgresSchema(t, dsn)
			c.fn(t, newEnv(t, func(t *testing.T, dir string) (*store.Store, error) { return store.OpenPostgres(ctx, d) }))
		})
	}
}

// waitPolls waits until n long polls wait on the server (a readiness wait, generous deadline).
func (e *env) waitPolls(n int) {
	e.t.Helper()
	want := fmt.Sprintf("\nsysbox_cp_long_polls %d\n", n)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(e.ts.URL + "/metrics")
		if err != nil {
			e.t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			e.t.Fatal(err)
		}
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no %d long polls waiting after 30 s:\n%s", n, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A waiting claim is handed a run queued while it waits, and a waiting read of a run's
// events answers the agent's next event and the run's end, each long before its wait (30 s,
// 25 s) ran out: the store's write wakes them.
func testLongPolls(t *testing.T, e *env) {
	p, tok, ws := e.project("red")
	a := e.join(p, "a", "driver:netns")
	type claimed struct {
		l   *client.Lease
		err error
	}
	claims := make(chan claimed, 1)
	go func() {
		l, err := a.ClaimWait(ctx, 30*time.Second)
		claims <- claimed{l, err}
	}()
	e.waitPolls(1)
	run := e.queue(p, tok, ws, "netns")
	c := <-claims
	if c.err != nil || c.l == nil || c.l.Run.ID != run.ID {
		t.Fatalf("waiting claim: got %+v, %v; want run %s", c.l, c.err, run.ID)
	}
	u := &client.User{URL: e.ts.URL, Token: tok, HTTP: e.hc}
	type read struct {
		evs []client.RunEvent
		err error
	}
	reads := make(chan read, 1)
	go func() {
		evs, err := u.EventsWait(ctx, p, run.ID, 0, 30*time.Second)
		reads <- read{evs, err}
	}()
	e.waitPolls(1)
	if _, err := a.Events(ctx, c.l, client.Event{Kind: "progress", Data: "one"}); err != nil {
		t.Fatal(err)
	}
	if r := <-reads; r.err != nil || len(r.evs) != 1 || r.evs[0].Data != "one" {
		t.Fatalf("waiting read: got %+v, %v; want event one", r.evs, r.err)
	}
	type followed struct {
		st   client.RunStatus
		data []string
		err  error
	}
	follows := make(chan followed, 1)
	go func() {
		var data []string
		st, err := u.Follow(ctx, p, run.ID, func(ev client.RunEvent) { data = append(data, ev.Data) })
		follows <- followed{st, data, err}
	}()
	e.waitPolls(1) // the follower read "one" and waits for more
	if _, err := a.Events(ctx, c.l, client.Event{Kind: "progress", Data: "two"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Complete(ctx, c.l, "succeeded", "done", 0); err != nil {
		t.Fatal(err)
	}
	f := <-follows
	if f.err != nil || f.st.Status != "succeeded" || !slices.Equal(f.data, []string{"one", "two"}) {
		t.Fatalf("follow: got %+v %q, %v; want succeeded after one, two", f.st, f.data, f.err)
	}
	for _, q := range []string{"wait=31", "wait=-1", "wait=soon"} {
		e.want(400, "GET", "/v1/projects/"+p+"/runs/"+run.ID+"/events?"+q, tok, nil, nil)
		if code, _, err := a.Do(ctx, http.MethodPost, "/v1/agent/claim?"+q, 0, nil); err != nil || code != 400 {
			t.Fatalf("claim with %s: got %d, %v; want 400", q, code, err)
		}
	}
}

// An agent whose lease lapsed reads nothing more of the run (plan, revision), even before
// another agent claimed it.
func testLapsedLeaseReadsNothing(t *testing.T, e *env) {
	p, tok, ws := e.project("red")
	a := e.join(p, "a", "driver:netns")
	e.queue(p, tok, ws, "netns")
	l, err := a.Claim(ctx)
	if err != nil || l == nil {
		t.Fatalf("claim: %+v, %v", l, err)
	}
	if _, err := a.Plan(ctx, l); err != nil {
		t.Fatalf("plan under a live lease: %v", err)
	}
	e.clock.Advance(e.srv.LeaseTTL + time.Second)
	if _, err := a.Plan(ctx, l); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("plan after the lapse: got %v, want fenced", err)
	}
	if _, err := a.Revision(ctx, l); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("revision after the lapse: got %v, want fenced", err)
	}
}

// Many agents claiming at once over HTTP: every run is claimed exactly once and no claim
// fails (an SQLite claim once answered 500 under 50 concurrent claimers).
func testManyConcurrentClaimers(t *testing.T, e *env) {
	p, tok, ws := e.project("red")
	first := e.queue(p, tok, ws, "netns")
	const agents, runs = 50, 150
	want := map[string]bool{first.ID: true}
	for len(want) < runs {
		r, err := e.st.CreateRun(ctx, p, first.Plan, "apply", false)
		if err != nil {
			t.Fatal(err)
		}
		want[r.ID] = true
	}
	as := make([]*client.Agent, agents)
	for i := range as {
		as[i] = e.join(p, fmt.Sprint("a", i), "driver:netns")
	}
	var mu sync.Mutex
	got := map[string][]string{}
	var wg sync.WaitGroup
	for _, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				l, err := a.Claim(ctx)
				if err != nil {
					t.Errorf("agent %s: claim: %v", a.ID, err)
					return
				}
				if l == nil {
					return
				}
				mu.Lock()
				got[l.Run.ID] = append(got[l.Run.ID], a.ID)
				mu.Unlock()
				if err := a.Complete(ctx, l, "succeeded", "ok", 0); err != nil {
					t.Errorf("agent %s: complete %s: %v", a.ID, l.Run.ID, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(got) != runs {
		t.Fatalf("got %d runs claimed, want %d", len(got), runs)
	}
	for id, by := range got {
		if !want[id] || len(by) != 1 {
			t.Fatalf("run %s claimed by %v, want exactly one of the queued runs' claims", id, by)
		}
	}
	if strings.Contains(e.log.String(), "request failed") {
		t.Fatalf("the server logged a failure:\n%s", e.log.String())
	}
}

// Revoking the agent that keeps a workspace's state fails its sticky runs with the reason,
// and a new sticky run for that workspace is refused with 409.
func testRevokedAgentsWorkspace(t *testing.T, e *env) {
	p, tok, ws := e.project("red")
	a := e.join(p, "a", "driver:netns")
	var rev store.Revision
	e.want(201, "POST", "/v1/projects/"+p+"/revisions", tok, []byte("bundle"), &rev)
	sticky := map[string]any{"op": "state list", "workspace": ws, "revision": rev.Digest, "sticky": true}
	var run store.Run
	e.want(201, "POST", "/v1/projects/"+p+"/runs", tok, sticky, &run)
	if l, err := a.Claim(ctx); err != nil || l == nil {
		t.Fatalf("claim: %+v, %v", l, err)
	}
	e.want(204, "POST", "/v1/projects/"+p+"/agents/"+a.ID+"/revoke", tok, nil, nil)
	e.want(200, "GET", "/v1/projects/"+p+"/runs/"+run.ID, tok, nil, &run)
	if run.Status != "failed" || !strings.Contains(run.Result, "revoked") {
		t.Fatalf("the revoked agent's run: got %s %q, want failed, saying why", run.Status, run.Result)
	}
	e.want(409, "POST", "/v1/projects/"+p+"/runs", tok, sticky, nil)
}
