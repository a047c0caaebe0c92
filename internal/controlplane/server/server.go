package server

import (
	"bytes"
	"context"
	"crypto/ed25519"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.yaml.in/yaml/v4"

	"zyvor.dev/sysbox/internal/controlplane/store"
	"zyvor.dev/sysbox/internal/controlplane/webui"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/plans"
)

//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPIJSON returns the API's OpenAPI document (openapi.yaml) as JSON, as /v1/openapi.json
// serves it. The document is parsed and validated as OpenAPI by the tests, not here: every CLI
// command links this package, and an OpenAPI library's start-up cost (tens of milliseconds of
// schema compilation) is not worth paying in each of them.
func OpenAPIJSON() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openapiYAML, &doc); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	return b, nil
}

// OpenAPIYAML is the API's OpenAPI document as written.
func OpenAPIYAML() []byte { return slices.Clone(openapiYAML) }

// AdminTokenFile is the data directory's file holding the admin token.
const AdminTokenFile = "admin.token"

// ServerKeyFile is the data directory's file holding the server's signing key.
const ServerKeyFile = "server.key"

// Bootstrap makes sure an admin token exists: at first start (no AdminTokenFile in dataDir) it
// creates one and writes it there, 0600 and durably. It returns the file's path.
func Bootstrap(ctx context.Context, st *store.Store, dataDir string) (string, error) {
	path := filepath.Join(dataDir, AdminTokenFile)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	tok, _, err := st.CreateToken(ctx, store.TokenAdmin, "", "bootstrap")
	if err != nil {
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	if err := durable.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	return path, nil
}

// Server serves the API.
type Server struct {
	store *store.Store
	key   ed25519.PrivateKey
	log   *slog.Logger
	doc   []byte
	mux   *http.ServeMux
	// patterns are the /v1 routes, as registered.
	patterns []string
	// LeaseTTL is the lease a claim grants (agents renew at a third of it).
	LeaseTTL time.Duration
	// Now is the clock signatures are checked with.
	Now func() time.Time

	// UI is the read-only web view at /ui/.
	UI *webui.View

	// closing ends long polls when the server shuts down (Shutdown waits for open requests).
	closing   chan struct{}
	closeOnce sync.Once

	reg       *prometheus.Registry
	requests  *prometheus.CounterVec
	refused   *prometheus.CounterVec
	claims    prometheus.Counter
	events    prometheus.Counter
	fencedOps prometheus.Counter
	polls     prometheus.Gauge
}

// New returns a server over st that signs its answers to agents with key and logs to log.
func New(st *store.Store, key ed25519.PrivateKey, log *slog.Logger) (*Server, error) {
	docJSON, err := OpenAPIJSON()
	if err != nil {
		return nil, err
	}
	s := &Server{store: st, key: key, log: log, doc: docJSON, LeaseTTL: 30 * time.Second, Now: time.Now, closing: make(chan struct{}),
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sysbox_cp_http_requests_total",
			Help: "HTTP requests by route pattern and status code."}, []string{"route", "code"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sysbox_cp_agent_refused_total",
			Help: "Agent requests refused, by failure class."}, []string{"reason"}),
		claims: prometheus.NewCounter(prometheus.CounterOpts{Name: "sysbox_cp_runs_claimed_total",
			Help: "Runs claimed by agents."}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "sysbox_cp_events_ingested_total",
			Help: "Run events appended."}),
		fencedOps: prometheus.NewCounter(prometheus.CounterOpts{Name: "sysbox_cp_fenced_writes_total",
			Help: "Writes refused for a stale lease epoch."}),
		polls: prometheus.NewGauge(prometheus.GaugeOpts{Name: "sysbox_cp_long_polls",
			Help: "Long polls (claims, event reads) waiting now."}),
	}
	s.reg.MustRegister(s.requests, s.refused, s.claims, s.events, s.fencedOps, s.polls,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.routes()
	return s, nil
}

// Handler is the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.mux }

// Close ends the web view's open event streams and the long polls (http.Server.Shutdown waits
// for them).
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
	s.UI.Close()
}

// Routes lists the /v1 routes served ("METHOD /path/{param}"), sorted.
func (s *Server) Routes() []string {
	out := append([]string{}, s.patterns...)
	sort.Strings(out)
	return out
}

func (s *Server) routes() {
	m := http.NewServeMux()
	s.mux = m
	handle := func(pattern string, h http.HandlerFunc) {
		s.patterns = append(s.patterns, pattern)
		m.Handle(pattern, s.count(pattern, h))
	}
	handle("GET /v1/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(s.doc)
	})
	m.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.UI = webui.New(s.store, s.key, s.log)
	m.Handle("/ui/", s.UI.Handler())

	handle("GET /v1/projects", s.user(s.listProjects))
	handle("POST /v1/projects", s.user(s.createProject))
	handle("POST /v1/projects/{project}/tokens", s.project(s.createToken))
	handle("GET /v1/projects/{project}/workspaces", s.project(s.listWorkspaces))
	handle("POST /v1/projects/{project}/workspaces", s.project(s.createWorkspace))
	handle("GET /v1/projects/{project}/workspaces/{workspace}", s.project(s.getWorkspace))
	handle("GET /v1/projects/{project}/workspaces/{workspace}/projections", s.project(s.listProjections))
	handle("POST /v1/projects/{project}/workspaces/{workspace}/plans", s.project(s.createPlan))
	handle("POST /v1/projects/{project}/revisions", s.project(s.putRevision))
	handle("POST /v1/projects/{project}/runs", s.project(s.createRun))
	handle("GET /v1/projects/{project}/runs/{run}", s.project(s.getRun))
	handle("GET /v1/projects/{project}/runs/{run}/events", s.project(s.listEvents))
	handle("GET /v1/projects/{project}/agents", s.project(s.listAgents))
	handle("POST /v1/projects/{project}/agents/{agent}/revoke", s.project(s.revokeAgent))

	handle("POST /v1/agents/join", s.join)
	handle("POST /v1/agent/heartbeat", s.agent(s.heartbeat))
	handle("POST /v1/agent/claim", s.agent(s.claim))
	handle("GET /v1/agent/runs/{run}/plan", s.agent(s.agentPlan))
	handle("GET /v1/agent/runs/{run}/revision", s.agent(s.agentRevision))
	handle("POST /v1/agent/runs/{run}/renew", s.agent(s.renew))
	handle("POST /v1/agent/runs/{run}/events", s.agent(s.appendEvents))
	handle("POST /v1/agent/runs/{run}/projections", s.agent(s.putProjections))
	handle("POST /v1/agent/runs/{run}/complete", s.agent(s.complete))
	handle("POST /v1/agent/runs/{run}/plan-output", s.agent(s.putRunPlan))
	handle("GET /v1/projects/{project}/plans/{plan}", s.project(s.getPlanFile))
}

// statusWriter remembers the status code for the request counter.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

func (s *Server) count(pattern string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		h(sw, r)
		s.requests.WithLabelValues(pattern, strconv.Itoa(sw.code)).Inc()
	})
}

// maxBody bounds request bodies (plan files and bundles included).
const maxBody = 64 << 20

type apiError struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: msg})
}

// fail maps a store error to a status: not found 404, exists or a revoked workspace agent 409, fenced 409, else 500 (the
// cause logged, a generic message answered).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		writeErr(w, http.StatusNotFound, err.Error())
	case errors.Is(err, store.ErrExists), errors.Is(err, store.ErrHolderRevoked):
		writeErr(w, http.StatusConflict, err.Error())
	case errors.Is(err, store.ErrFenced):
		s.fencedOps.Inc()
		s.log.Warn("fenced write refused", "method", r.Method, "path", r.URL.Path, "err", err)
		writeErr(w, http.StatusConflict, err.Error())
	case r.Context().Err() != nil:
		// The client went away (an agent shutting down): nothing failed here.
		s.log.Debug("request abandoned by its client", "method", r.Method, "path", r.URL.Path, "err", err)
		writeErr(w, http.StatusServiceUnavailable, "request abandoned")
	default:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeErr(w, http.StatusInternalServerError, "internal error (logged)")
	}
}

// reply answers v with code, or the error as fail maps it.
func (s *Server) reply(w http.ResponseWriter, r *http.Request, code int, v any, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, code, v)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeErr(w, http.StatusBadRequest, "request body: "+err.Error())
		return false
	}
	return true
}

// user authenticates a bearer token (admin or project).
func (s *Server) user(h func(http.ResponseWriter, *http.Request, store.Token)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			writeErr(w, http.StatusUnauthorized, "a bearer token is required")
			return
		}
		t, err := s.store.LookupToken(r.Context(), strings.TrimSpace(tok))
		if errors.Is(err, store.ErrNotFound) {
			s.log.Warn("unknown bearer token refused", "method", r.Method, "path", r.URL.Path)
			writeErr(w, http.StatusUnauthorized, "unknown token")
			return
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		h(w, r, t)
	}
}

// project authenticates a token that may act on the path's project: an admin token, or that
// project's token. Any other token gets 404, as if the project did not exist.
func (s *Server) project(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return s.user(func(w http.ResponseWriter, r *http.Request, t store.Token) {
		p := r.PathValue("project")
		if t.Kind != store.TokenAdmin && t.Project != p {
			writeErr(w, http.StatusNotFound, "project "+p+": not found")
			return
		}
		if _, err := s.store.Project(r.Context(), p); err != nil {
			s.fail(w, r, err)
			return
		}
		h(w, r, p)
	})
}

func (s *Server) listProjects(w http.ResponseWriter, r *http.Request, t store.Token) {
	if t.Kind != store.TokenAdmin {
		p, err := s.store.Project(r.Context(), t.Project)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, []store.Project{p})
		return
	}
	ps, err := s.store.Projects(r.Context())
	s.reply(w, r, http.StatusOK, ps, err)
}

type nameRequest struct {
	Name string `json:"name"`
}

func (s *Server) createProject(w http.ResponseWriter, r *http.Request, t store.Token) {
	if t.Kind != store.TokenAdmin {
		writeErr(w, http.StatusForbidden, "only an admin token creates projects")
		return
	}
	var req nameRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Name == "" {
		writeErr(w, http.StatusBadRequest, "name: empty")
		return
	}
	p, err := s.store.CreateProject(r.Context(), req.Name)
	s.reply(w, r, http.StatusCreated, p, err)
}

type tokenRequest struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

type newToken struct {
	Token   string `json:"token"`
	Kind    string `json:"kind"`
	Project string `json:"project"`
	Name    string `json:"name"`
}

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, project string) {
	var req tokenRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Kind != store.TokenProject && req.Kind != store.TokenJoin || req.Name == "" {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("token %q: kind %q (want project or join) and a name", req.Name, req.Kind))
		return
	}
	plain, t, err := s.store.CreateToken(r.Context(), req.Kind, project, req.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("token created", "project", project, "kind", t.Kind, "name", t.Name)
	writeJSON(w, http.StatusCreated, newToken{Token: plain, Kind: t.Kind, Project: project, Name: t.Name})
}

func (s *Server) listWorkspaces(w http.ResponseWriter, r *http.Request, project string) {
	ws, err := s.store.Workspaces(r.Context(), project)
	s.reply(w, r, http.StatusOK, ws, err)
}

func (s *Server) createWorkspace(w http.ResponseWriter, r *http.Request, project string) {
	var req nameRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Name == "" {
		writeErr(w, http.StatusBadRequest, "name: empty")
		return
	}
	ws, err := s.store.CreateWorkspace(r.Context(), project, req.Name)
	s.reply(w, r, http.StatusCreated, ws, err)
}

func (s *Server) getWorkspace(w http.ResponseWriter, r *http.Request, project string) {
	ws, err := s.store.Workspace(r.Context(), project, r.PathValue("workspace"))
	s.reply(w, r, http.StatusOK, ws, err)
}

func (s *Server) listProjections(w http.ResponseWriter, r *http.Request, project string) {
	ps, err := s.store.Projections(r.Context(), project, r.PathValue("workspace"))
	s.reply(w, r, http.StatusOK, ps, err)
}

func (s *Server) putRevision(w http.ResponseWriter, r *http.Request, project string) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "revision bundle: "+err.Error())
		return
	}
	rev, created, err := s.store.PutRevision(r.Context(), project, b)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	writeJSON(w, code, rev)
}

type planRequest struct {
	Revision string `json:"revision"`
	Plan     []byte `json:"plan"`
}

// Requirements are the capabilities an agent needs to apply p: one "driver:NAME" per driver
// the plan was made against.
func Requirements(p *plans.Plan) []string {
	var out []string
	for _, d := range p.Fingerprint.Drivers {
		out = append(out, "driver:"+d.Name)
	}
	return out
}

func (s *Server) createPlan(w http.ResponseWriter, r *http.Request, project string) {
	var req planRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Revision == "" {
		writeErr(w, http.StatusBadRequest, "plan: no revision (the topology bundle the plan was made from; agents apply it)")
		return
	}
	p, err := plans.Decode(req.Plan)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "plan: "+err.Error())
		return
	}
	pl, err := s.store.PutPlan(r.Context(), project, r.PathValue("workspace"), req.Revision, req.Plan, Requirements(p))
	s.reply(w, r, http.StatusCreated, pl, err)
}

type runRequest struct {
	Plan   string `json:"plan"`
	Op     string `json:"op"`
	Sticky bool   `json:"sticky"`
	// A run without a plan is a remote command on a workspace's topology revision.
	Workspace string   `json:"workspace"`
	Revision  string   `json:"revision"`
	Args      []string `json:"args"`
	Requires  []string `json:"requires"`
}

// Ops are the run kinds: apply and destroy of a stored plan (or as commands), and the remote
// commands of the CLI. The agent checks each command's arguments against its own list.
var Ops = []string{"apply", "destroy", "reset", "refresh", "plan", "state list", "state show", "output"}

func (s *Server) createRun(w http.ResponseWriter, r *http.Request, project string) {
	var req runRequest
	if !decode(w, r, &req) {
		return
	}
	if !slices.Contains(Ops, req.Op) {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("op %q: want one of %s", req.Op, strings.Join(Ops, ", ")))
		return
	}
	if req.Plan != "" && (req.Workspace != "" || req.Revision != "" || len(req.Requires) > 0) {
		writeErr(w, http.StatusBadRequest, "run: a plan brings its own workspace, revision and requirements")
		return
	}
	if req.Plan == "" && (req.Workspace == "" || req.Revision == "") {
		writeErr(w, http.StatusBadRequest, "run: name a plan, or a workspace and a revision")
		return
	}
	if req.Plan != "" && req.Op != "apply" && req.Op != "destroy" {
		writeErr(w, http.StatusBadRequest, fmt.Sprintf("op %q: a stored plan is applied or destroyed", req.Op))
		return
	}
	run, err := s.store.QueueRun(r.Context(), project, store.RunSpec{Plan: req.Plan, Workspace: req.Workspace, Revision: req.Revision,
		Op: req.Op, Args: req.Args, Requires: req.Requires, Sticky: req.Sticky})
	s.reply(w, r, http.StatusCreated, run, err)
}

func (s *Server) getPlanFile(w http.ResponseWriter, r *http.Request, project string) {
	_, data, err := s.store.PlanData(r.Context(), project, r.PathValue("plan"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(data)
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, project string) {
	run, err := s.store.Run(r.Context(), project, r.PathValue("run"))
	s.reply(w, r, http.StatusOK, run, err)
}

// listEvents answers the run's events after the query's "after"; with "wait" (seconds) and
// none yet, it waits for one or the run's end (a long poll: the store's write wakes it).
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request, project string) {
	after := int64(0)
	if a := r.URL.Query().Get("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			writeErr(w, http.StatusBadRequest, fmt.Sprintf("after %q: not a sequence number", a))
			return
		}
		after = n
	}
	wait, ok := waitParam(w, r)
	if !ok {
		return
	}
	deadline := time.Now().Add(wait)
	id := r.PathValue("run")
	for {
		changed := s.store.Changed(store.RunTopic(id))
		// The run's status first: a run that had ended had written all its events.
		run, err := s.store.Run(r.Context(), project, id)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		evs, err := s.store.Events(r.Context(), project, id, after, 1000)
		if err != nil || len(evs) > 0 || run.Status == store.RunSucceeded || run.Status == store.RunFailed {
			s.reply(w, r, http.StatusOK, evs, err)
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			writeJSON(w, http.StatusOK, evs)
			return
		}
		switch s.waitChange(r, changed, left) {
		case waitGone:
			return
		case waitClosing:
			deadline = time.Now() // answer what there is
		}
	}
}

func (s *Server) listAgents(w http.ResponseWriter, r *http.Request, project string) {
	as, err := s.store.Agents(r.Context(), project)
	s.reply(w, r, http.StatusOK, as, err)
}

func (s *Server) revokeAgent(w http.ResponseWriter, r *http.Request, project string) {
	if err := s.store.RevokeAgent(r.Context(), project, r.PathValue("agent")); err != nil {
		s.fail(w, r, err)
		return
	}
	s.log.Info("agent revoked", "project", project, "agent", r.PathValue("agent"))
	w.WriteHeader(http.StatusNoContent)
}

// readBody reads a request body whole (signatures cover it).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeErr(w, http.StatusBadRequest, "request body: "+err.Error())
		return nil, false
	}
	return b, true
}

func unmarshal(w http.ResponseWriter, b []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeErr(w, http.StatusBadRequest, "request body: "+err.Error())
		return false
	}
	return true
}
