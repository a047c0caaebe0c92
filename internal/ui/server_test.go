package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"zyvor.dev/sysbox/internal/config"
	"zyvor.dev/sysbox/internal/states"
	"zyvor.dev/sysbox/internal/ui/uitest"
	"zyvor.dev/sysbox/pkg/substrate"
)

// fakeLab is an in-memory state the test changes between polls.
type fakeLab struct {
	mu  sync.Mutex
	top *config.Topology
	st  *states.State
	run *Run
	err error
}

func (f *fakeLab) load(context.Context) (*Graph, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	g := Build(f.top, f.st)
	if f.run != nil {
		r := *f.run
		r.Checkpoints = append([]Checkpoint(nil), r.Checkpoints...)
		g.Run = &r
	}
	return g, nil
}

// checkpoint appends a checkpoint record of run id (started on first use) and sets its status.
func (f *fakeLab) checkpoint(id, status string, c Checkpoint) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.run == nil || f.run.ID != id {
		f.run = &Run{ID: id, Op: "apply", Lines: []string{}}
	}
	f.run.Status = status
	c.Seq = uint64(len(f.run.Checkpoints) + 1)
	f.run.Checkpoints = append(f.run.Checkpoints, c)
}

// reset bumps the generation of addr as `sysbox reset` does.
func (f *fakeLab) reset(t testing.TB, addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := *f.st.Resource(mustAddr(t, addr))
	r.Owner.Generation++
	r.ExternalID += "-r"
	f.st.Set(&r)
	f.st.Serial++
}

// observe records a refresh's observation of addr.
func (f *fakeLab) observe(t testing.TB, addr string, status substrate.Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := *f.st.Resource(mustAddr(t, addr))
	r.Observation = states.Observation{Status: status, Reason: "process gone", At: r.Observation.At}
	f.st.Set(&r)
	f.st.Serial++
}

func newFakeLab(t testing.TB) *fakeLab {
	top := quickstart(t)
	return &fakeLab{top: top, st: applied(t, top, 1)}
}

// readEvent reads the next event.
func readEvent(t testing.TB, r *bufio.Reader) uitest.Event { return uitest.ReadEvent(t, r) }

func openEvents(t testing.TB, ctx context.Context, url, lastID string) *bufio.Reader {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET /events: got %s %q, want 200 text/event-stream", resp.Status, resp.Header.Get("Content-Type"))
	}
	return bufio.NewReader(resp.Body)
}

func generationIn(t testing.TB, data, addr string) uint64 {
	t.Helper()
	var g Graph
	if err := json.Unmarshal([]byte(data), &g); err != nil {
		t.Fatalf("event data: %v", err)
	}
	return element(t, &g, addr).Generation
}

func TestGraphEndpoint(t *testing.T) {
	lab := newFakeLab(t)
	ts := httptest.NewServer(NewServer(Loader(lab.load)).Handler())
	defer ts.Close()
	resp, err := http.Get(ts.URL + "/api/graph")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("X-Sysbox-Event-Id") != "1" {
		t.Fatalf("GET /api/graph: got %s %q event %q, want 200 application/json event 1", resp.Status,
			resp.Header.Get("Content-Type"), resp.Header.Get("X-Sysbox-Event-Id"))
	}
	var g Graph
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("GET /api/graph: %v: %s", err, b)
	}
	if e := element(t, &g, "sysbox_node.router"); e.Observation != string(substrate.Present) || e.Generation != 1 {
		t.Errorf("router: got %+v, want present generation 1", e)
	}
	if strings.Contains(string(b), "PRIVATE-") {
		t.Errorf("/api/graph carries private envelope content: %s", b)
	}
}

func TestEventsStreamChangesAndResume(t *testing.T) {
	lab := newFakeLab(t)
	s := NewServer(Loader(lab.load))
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	r := openEvents(t, ctx, ts.URL, "")
	ev := readEvent(t, r)
	if ev.ID != "1" || ev.Name != "graph" || generationIn(t, ev.Data, "sysbox_node.server") != 1 {
		t.Fatalf("first event: got id %q name %q, want 1 graph with generation 1", ev.ID, ev.Name)
	}
	// An unchanged graph is no event.
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	lab.reset(t, "sysbox_node.server")
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	ev = readEvent(t, r)
	if ev.ID != "2" || generationIn(t, ev.Data, "sysbox_node.server") != 2 {
		t.Fatalf("after reset: got id %q, want 2 with generation 2", ev.ID)
	}
	if strings.Contains(ev.Data, "PRIVATE-") {
		t.Errorf("event carries private envelope content")
	}

	// A client that saw event 2 resumes without a repeat: its first event is the next change.
	r2 := openEvents(t, ctx, ts.URL, "2")
	lab.reset(t, "sysbox_node.client")
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := readEvent(t, r2); ev.ID != "3" || generationIn(t, ev.Data, "sysbox_node.client") != 2 {
		t.Fatalf("resume from 2: got first id %q, want 3 with client generation 2", ev.ID)
	}
	// A client that missed events gets the latest graph at once.
	r3 := openEvents(t, ctx, ts.URL, "1")
	if ev := readEvent(t, r3); ev.ID != "3" || generationIn(t, ev.Data, "sysbox_node.server") != 2 {
		t.Fatalf("resume from 1: got id %q, want 3 with server generation 2", ev.ID)
	}
}

func TestLoadErrorIsPublished(t *testing.T) {
	lab := newFakeLab(t)
	lab.err = errors.New("read state: local backend: /x/state: checksum mismatch")
	s := NewServer(Loader(lab.load))
	if err := s.Poll(context.Background()); err == nil {
		t.Fatal("Poll: got nil error, want the load error")
	}
	_, body, _ := s.current()
	var g Graph
	if err := json.Unmarshal(body, &g); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.Error, "checksum mismatch") || len(g.Elements) != 0 {
		t.Errorf("got error %q with %d elements, want the load error and none", g.Error, len(g.Elements))
	}
}

func TestHandlerRefuses(t *testing.T) {
	h := NewServer(Loader(newFakeLab(t).load)).Handler()
	for _, tc := range []struct {
		name, method, host, path string
		want                     int
	}{
		{"foreign host", "GET", "lab.example.com", "/api/graph", http.StatusForbidden},
		{"post", "POST", "127.0.0.1:8081", "/api/graph", http.StatusMethodNotAllowed},
		{"unknown path", "GET", "127.0.0.1:8081", "/api/state", http.StatusNotFound},
		{"page", "GET", "localhost:8081", "/", http.StatusOK},
		{"library", "GET", "[::1]:8081", "/assets/cytoscape.min.js", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://"+tc.host+tc.path, nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s %s (Host %s): got %d, want %d", tc.method, tc.path, tc.host, rec.Code, tc.want)
			}
		})
	}
}

// versioned is a source that stamps its graphs with a version, as the control plane does.
type versioned struct {
	mu      sync.Mutex
	lab     *fakeLab
	version string
}

func (v *versioned) Graph(ctx context.Context) (*Graph, error) {
	g, err := v.lab.load(ctx)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	g.Version = v.version
	return g, nil
}

func (v *versioned) set(version string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.version = version
}

// TestSourceVersionIsEventID: a source's version is the event id, so a client resumes with it
// against a restarted server (or another replica) without a repeat; a changed graph under an
// unchanged version still reaches open streams under an id of its own.
func TestSourceVersionIsEventID(t *testing.T) {
	src := &versioned{lab: newFakeLab(t), version: "run_a.7.p100"}
	first := NewServer(src)
	if err := first.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	if id, _, _ := first.current(); id != "run_a.7.p100" {
		t.Fatalf("event id: got %q, want the source's version run_a.7.p100", id)
	}

	// A second server over the same data (a restart) lets a client resume from that id.
	s := NewServer(src)
	mux := http.NewServeMux()
	mux.Handle("/w/x/", http.StripPrefix("/w/x", s.Mux()))
	ts := httptest.NewServer(mux)
	defer ts.Close()
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := openEvents(t, ctx, ts.URL+"/w/x", "run_a.7.p100")
	src.lab.reset(t, "sysbox_node.server")
	src.set("run_a.9.p200")
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := readEvent(t, r); ev.ID != "run_a.9.p200" || generationIn(t, ev.Data, "sysbox_node.server") != 2 {
		t.Fatalf("resume from run_a.7.p100: got first id %q, want run_a.9.p200 with generation 2", ev.ID)
	}
	src.lab.reset(t, "sysbox_node.client")
	if err := s.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := readEvent(t, r); ev.ID == "run_a.9.p200" || !strings.HasPrefix(ev.ID, "run_a.9.p200.") || generationIn(t, ev.Data, "sysbox_node.client") != 2 {
		t.Fatalf("changed graph under the same version: got id %q, want a new id run_a.9.p200.N with client generation 2", ev.ID)
	}
}
