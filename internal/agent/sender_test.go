package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"zyvor.dev/sysbox/internal/controlplane/client"
)

// sent is one request the fake server received: events or projections.
type sent struct {
	events      []client.Event
	projections []client.Projection
}

// fakeServer answers the agent's event and projection writes, recording them in order;
// refuse makes it answer 409 (fenced) from then on.
type fakeServer struct {
	mu     sync.Mutex
	got    []sent
	refuse bool
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse {
		w.WriteHeader(http.StatusConflict)
		w.Write([]byte(`{"error":"lease lost (fenced)"}`))
		return
	}
	switch {
	case strings.HasSuffix(r.URL.Path, "/events"):
		var req struct{ Events []client.Event }
		json.Unmarshal(b, &req)
		f.got = append(f.got, sent{events: req.Events})
		w.Write([]byte(`{"seqs":[]}`))
	case strings.HasSuffix(r.URL.Path, "/projections"):
		var ps []client.Projection
		json.Unmarshal(b, &ps)
		f.got = append(f.got, sent{projections: ps})
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func newTestSender(t *testing.T, f *fakeServer, fenced func(error) error) *sender {
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	_, key, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	a := &client.Agent{URL: ts.URL, ID: "agt_test", Key: key}
	return newSender(context.Background(), a, &client.Lease{Run: client.Run{ID: "run_1"}, Epoch: 1}, fenced)
}

// The sender keeps the order it was handed: every event arrives once, in order, and a
// projection arrives only after the events queued before it; the last projection of an
// address wins. (How requests batch depends on timing; these properties do not.)
func TestSenderKeepsOrder(t *testing.T) {
	f := &fakeServer{}
	s := newTestSender(t, f, func(err error) error { return err })
	var want []string
	projectedAfter := map[string]int{} // projection external id -> events queued before it
	for i := range 30 {
		ev := client.Event{Kind: "progress", Data: string(rune('a'+i%26)) + strings.Repeat("x", i)}
		want = append(want, ev.Data)
		if err := s.add(ev); err != nil {
			t.Fatal(err)
		}
		if i%7 == 3 {
			id := "id-" + ev.Data
			projectedAfter[id] = len(want)
			if err := s.project(client.Projection{Address: "node.a", ExternalID: id}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.project(client.Projection{Address: "node.a", ExternalID: "last"}, client.Projection{Address: "node.b", ExternalID: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.drain(); err != nil {
		t.Fatal(err)
	}
	var got []string
	final := map[string]string{}
	for _, r := range f.got {
		for _, e := range r.events {
			got = append(got, e.Data)
		}
		for _, p := range r.projections {
			if n, ok := projectedAfter[p.ExternalID]; ok && len(got) < n {
				t.Fatalf("projection %s arrived after %d events, want after the %d queued before it", p.ExternalID, len(got), n)
			}
			final[p.Address] = p.ExternalID
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("events arrived as %q, want %q", got, want)
	}
	if final["node.a"] != "last" || final["node.b"] != "b" {
		t.Fatalf("final projections %v, want node.a last and node.b b", final)
	}
}

// A fenced refusal stops the sender: fenced is told, what is queued is dropped, and later
// writes are refused at once.
func TestSenderStopsWhenFenced(t *testing.T) {
	f := &fakeServer{refuse: true}
	var told error
	s := newTestSender(t, f, func(err error) error { told = err; return err })
	if err := s.add(client.Event{Kind: "progress", Data: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := s.drain(); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("drain: got %v, want fenced", err)
	}
	if !errors.Is(told, client.ErrFenced) {
		t.Fatalf("fenced callback got %v", told)
	}
	if err := s.project(client.Projection{Address: "node.a"}); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("projection after the refusal: got %v, want fenced at once", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) != 0 {
		t.Fatalf("the server recorded %d writes, want none", len(f.got))
	}
}
