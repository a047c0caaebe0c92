package backendtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// DocServer is a minimal in-memory GET/PUT/DELETE document store, like a plain HTTP state
// endpoint (no locking, no compare-and-swap), for tests of the http backend and of its users.
type DocServer struct {
	// URL is the server's base URL; any path under it addresses the one document.
	URL string

	mu   sync.Mutex
	doc  []byte
	puts int
}

// NewDocServer starts a DocServer on loopback, closed when the test ends.
func NewDocServer(t testing.TB) *DocServer {
	t.Helper()
	s := &DocServer{}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	s.URL = ts.URL
	return s
}

// ServeHTTP implements http.Handler.
func (s *DocServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodGet:
		if s.doc == nil {
			http.NotFound(w, r)
			return
		}
		w.Write(s.doc)
	case http.MethodPut:
		s.doc, _ = io.ReadAll(r.Body)
		s.puts++
	case http.MethodDelete:
		if s.doc == nil {
			http.NotFound(w, r)
			return
		}
		s.doc = nil
	default:
		http.Error(w, "method", http.StatusMethodNotAllowed)
	}
}

// Doc returns the stored document (nil when there is none).
func (s *DocServer) Doc() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.doc
}

// SetDoc replaces the stored document.
func (s *DocServer) SetDoc(doc []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doc = doc
}

// Puts returns the number of PUT requests served.
func (s *DocServer) Puts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}
