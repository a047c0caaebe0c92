package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"zyvor.dev/sysbox/internal/controlplane/client"
	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/store/storetest"
	"zyvor.dev/sysbox/internal/controlplane/wire"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/plans"
)

var ctx = context.Background()

// logBuffer collects the server's log.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// validating checks every response of the API against the OpenAPI document (status codes
// included); it counts what it checked so a test can show it ran.
type validating struct {
	t       *testing.T
	router  routers.Router
	mu      sync.Mutex
	checked int
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.URL.Path == "/metrics" {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(b))
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		v.t.Errorf("%s %s: not in the OpenAPI document: %v", req.Method, req.URL.Path, err)
		return resp, nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(b)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		v.t.Errorf("%s %s: answer %d does not match the OpenAPI document: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, b)
	}
	v.mu.Lock()
	v.checked++
	v.mu.Unlock()
	return resp, nil
}

// env is a running server over a fresh SQLite store.
type env struct {
	t      *testing.T
	dir    string
	st     *store.Store
	srv    *Server
	ts     *httptest.Server
	hc     *http.Client
	v      *validating
	log    *logBuffer
	clock  *storetest.Clock
	admin  string
	tokens []string // every token plaintext handed out, for the secrets check
}

// sqliteStore opens the SQLite store of a test's data directory.
func sqliteStore(t *testing.T, dir string) (*store.Store, error) {
	return store.OpenSQLite(ctx, filepath.Join(dir, "cp.db"))
}

func newEnv(t *testing.T, open func(t *testing.T, dir string) (*store.Store, error)) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := open(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clock := storetest.NewClock()
	st.Now = clock.Now
	path, err := Bootstrap(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	key, err := wire.LoadOrCreateKey(filepath.Join(dir, ServerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	lb := &logBuffer{}
	srv, err := New(st, key, slog.New(slog.NewTextHandler(lb, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	doc, err := openAPIDoc()
	if err != nil {
		t.Fatal(err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	v := &validating{t: t, router: router}
	e := &env{t: t, dir: dir, st: st, srv: srv, ts: ts, hc: &http.Client{Transport: v}, v: v, log: lb, clock: clock,
		admin: strings.TrimSpace(string(b))}
	e.tokens = append(e.tokens, e.admin)
	t.Cleanup(func() {
		if !t.Failed() && v.checked == 0 {
			t.Error("no response was validated against the OpenAPI document")
		}
	})
	return e
}

// do sends a user request with token and returns status and body.
func (e *env) do(method, path, token string, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case []byte:
		rd, ct = bytes.NewReader(b), "application/octet-stream"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", ct)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, out
}

// want sends a request, checks its status and decodes the answer into out (if not nil).
func (e *env) want(code int, method, path, token string, body, out any) {
	e.t.Helper()
	got, b := e.do(method, path, token, body)
	if got != code {
		e.t.Fatalf("%s %s: got %d %s, want %d", method, path, got, b, code)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
}

// project makes a project, a project token and a workspace.
func (e *env) project(name string) (project, token, workspace string) {
	e.t.Helper()
	var p store.Project
	e.want(201, "POST", "/v1/projects", e.admin, map[string]string{"name": name}, &p)
	var tok struct{ Token string }
	e.want(201, "POST", "/v1/projects/"+p.ID+"/tokens", e.admin, map[string]string{"kind": "project", "name": "ci"}, &tok)
	e.tokens = append(e.tokens, tok.Token)
	var w store.Workspace
	e.want(201, "POST", "/v1/projects/"+p.ID+"/workspaces", tok.Token, map[string]string{"name": "lab"}, &w)
	return p.ID, tok.Token, w.ID
}

// joinToken makes a join token of project.
func (e *env) joinToken(project string) string {
	e.t.Helper()
	var tok struct{ Token string }
	e.want(201, "POST", "/v1/projects/"+project+"/tokens", e.admin, map[string]string{"kind": "join", "name": "host"}, &tok)
	e.tokens = append(e.tokens, tok.Token)
	return tok.Token
}

// join registers a new agent with caps.
func (e *env) join(project, name string, caps ...string) *client.Agent {
	e.t.Helper()
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		e.t.Fatal(err)
	}
	a, err := client.Join(ctx, e.ts.URL, e.hc, e.joinToken(project), name, key, caps)
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// planFile is a valid stored-plan file made against drivers.
func planFile(t *testing.T, drivers ...string) []byte {
	t.Helper()
	p := &plans.Plan{ToolVersion: "test", Mode: "normal", Fingerprint: plans.Fingerprint{
		SourceDigest: store.Digest([]byte("source")), InputDigest: store.Digest([]byte("input")),
		Lineage: "lin", Serial: 1, ActionsDigest: plans.ActionsDigest(nil)}}
	for _, d := range drivers {
		p.Fingerprint.Drivers = append(p.Fingerprint.Drivers, driver.Descriptor{Name: d, Version: "1"})
	}
	path := filepath.Join(t.TempDir(), "plan")
	if err := plans.WriteFile(path, p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// queue stores a revision and a plan against drivers and queues a run of it.
func (e *env) queue(project, token, workspace string, drivers ...string) store.Run {
	e.t.Helper()
	var rev store.Revision
	e.want(201, "POST", "/v1/projects/"+project+"/revisions", token, []byte(fmt.Sprintf("bundle %v", drivers)), &rev)
	var pl store.Plan
	e.want(201, "POST", "/v1/projects/"+project+"/workspaces/"+workspace+"/plans", token,
		map[string]any{"revision": rev.Digest, "plan": planFile(e.t, drivers...)}, &pl)
	var run store.Run
	e.want(201, "POST", "/v1/projects/"+project+"/runs", token, map[string]any{"plan": pl.ID, "op": "apply"}, &run)
	return run
}

// planDigest is the digest of the plan stored for run.
func (e *env) planDigest(project string, run store.Run) string {
	e.t.Helper()
	_, data, err := e.st.PlanData(ctx, project, run.Plan)
	if err != nil {
		e.t.Fatal(err)
	}
	return store.Digest(data)
}

// revisionOf is the revision digest of run's plan.
func (e *env) revisionOf(project string, run store.Run) string {
	e.t.Helper()
	p, _, err := e.st.PlanData(ctx, project, run.Plan)
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Revision
}
