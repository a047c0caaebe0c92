package ui

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

//go:embed assets
var assets embed.FS

// Source feeds the page: it reads what it shows (configuration and local state for `sysbox
// ui`, a workspace's projections and latest plan for the control plane) and builds the graph.
// It must only read.
type Source interface {
	Graph(ctx context.Context) (*Graph, error)
}

// Loader is a Source written as a function.
type Loader func(ctx context.Context) (*Graph, error)

// Graph calls l.
func (l Loader) Graph(ctx context.Context) (*Graph, error) { return l(ctx) }

var _ Source = Loader(nil)

// Server holds the latest graph and tells /events subscribers when it changes. Each change
// gets an event id: the graph's Version when the source sets one (an id derived from stored
// data, the same after a restart or on another replica), else the next number; an event
// carries the whole graph, so a client that missed some events loses nothing by receiving
// only the latest.
type Server struct {
	src Source

	pollMu sync.Mutex // one load at a time: a slower, older load never replaces a newer graph

	mu      sync.Mutex
	n       uint64        // graphs published (ids when the source sets no version)
	id      string        // event id of body
	body    []byte        // JSON of the current graph
	changed chan struct{} // closed (and replaced) when body changes
	done    chan struct{} // closed by Close: event streams end
	once    sync.Once
}

// NewServer returns a server that shows the graphs of src.
func NewServer(src Source) *Server {
	return &Server{src: src, changed: make(chan struct{}), done: make(chan struct{})}
}

// Close ends every open event stream (an http.Server waits for them on shutdown).
func (s *Server) Close() { s.once.Do(func() { close(s.done) }) }

// Poll loads the graph once and publishes it as a new event if it differs from the last one.
// A load error is published as a graph carrying the error, so the page says why it is empty.
func (s *Server) Poll(ctx context.Context) error {
	s.pollMu.Lock()
	defer s.pollMu.Unlock()
	g, err := s.src.Graph(ctx)
	if err != nil {
		g = &Graph{Error: err.Error(), Elements: []Element{}, Edges: []Edge{}}
	}
	b, merr := json.Marshal(g)
	if merr != nil {
		return fmt.Errorf("ui: encode graph: %w", merr)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.body != nil && string(b) == string(s.body) {
		return err
	}
	s.n++
	switch {
	case g.Version == "":
		s.id = strconv.FormatUint(s.n, 10)
	case g.Version == s.id:
		// The source kept its version for a different graph: a stream must still see the
		// change, so this one gets an id of its own.
		s.id = g.Version + "." + strconv.FormatUint(s.n, 10)
	default:
		s.id = g.Version
	}
	s.body = b
	close(s.changed)
	s.changed = make(chan struct{})
	return err
}

// Run polls every interval until ctx ends.
func (s *Server) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		_ = s.Poll(ctx) // errors are published in the graph
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// current returns the latest event id, graph and the channel closed on the next change.
func (s *Server) current() (string, []byte, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, s.body, s.changed
}

// Handler serves Mux to a loopback Host header only (no DNS rebinding): `sysbox ui`.
func (s *Server) Handler() http.Handler {
	mux := s.Mux()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			http.Error(w, fmt.Sprintf("ui: host %q is not loopback", r.Host), http.StatusForbidden)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// Mux serves the page (/), its assets (/assets/), /api/graph and /events, whatever the Host:
// a caller mounting it elsewhere (the control plane, under a prefix it strips) authenticates
// first. Only GET and HEAD are accepted. The page refers to the rest by relative URLs, so it
// works under any prefix.
func (s *Server) Mux() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(assets, "assets")
	mux.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServer(http.FS(sub))))
	mux.HandleFunc("GET /{$}", servePage)
	mux.HandleFunc("GET /api/graph", s.serveGraph)
	mux.HandleFunc("GET /events", s.serveEvents)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", CSP)
		mux.ServeHTTP(w, r)
	})
}

// CSP is the page's content security policy: everything from its own origin, nothing else.
const CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'"

func servePage(w http.ResponseWriter, _ *http.Request) {
	b, err := assets.ReadFile("assets/index.html")
	if err != nil {
		http.Error(w, "ui: page missing: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b)
}

func loopbackHost(hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		h = hostport
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) serveGraph(w http.ResponseWriter, r *http.Request) {
	id, body, _ := s.current()
	if body == nil {
		_ = s.Poll(r.Context()) // a load error is published in the graph itself
		id, body, _ = s.current()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Sysbox-Event-Id", id)
	w.Write(body)
}

// serveEvents streams `graph` events. A client reconnecting with Last-Event-ID equal to the
// current id gets nothing until the next change; any other id gets the current graph at once.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "ui: streaming unsupported", http.StatusInternalServerError)
		return
	}
	last := r.Header.Get("Last-Event-ID")
	if _, body, _ := s.current(); body == nil {
		_ = s.Poll(r.Context())
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	ping := time.NewTicker(15 * time.Second)
	defer ping.Stop()
	for {
		id, body, changed := s.current()
		if id != last && body != nil {
			if _, err := fmt.Fprintf(w, "id: %s\nevent: graph\ndata: %s\n\n", id, body); err != nil {
				return
			}
			fl.Flush()
			last = id
		}
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-changed:
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}
