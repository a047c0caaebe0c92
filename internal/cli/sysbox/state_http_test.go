package sysbox

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"zyvor.dev/sysbox/internal/backend/backendtest"
	"zyvor.dev/sysbox/internal/states"
)

// docServer is a GET/PUT document store, like a plain HTTP state endpoint.
type docServer struct {
	mu   sync.Mutex
	doc  []byte
	puts int
}

func (s *docServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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
	}
}

func TestStateThroughUnsafeBackendNeedsAllowUnsafe(t *testing.T) {
	srv := &docServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	st := states.New()
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.web"))
	st.Set(backendtest.Resource(st.Lineage, "sysbox_node.db"))
	st.Serial = 1
	doc, err := states.Encode(st)
	if err != nil {
		t.Fatal(err)
	}
	srv.doc = doc
	dir := t.TempDir()
	hcl := "substrate \"lab\" {\n  backend \"http\" {\n    address = \"" + ts.URL + "/state\"\n  }\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.sysbox.hcl"), []byte(hcl), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := runCLI(t, dir, "", "state", "list"); code != 0 || out != "sysbox_node.db\nsysbox_node.web\n" {
		t.Fatalf("list (reads need no lock): exit %d %q %q", code, out, errOut)
	}
	_, errOut, code := runCLI(t, dir, "", "state", "rm", "sysbox_node.db")
	if code != 1 || !strings.Contains(errOut, "http backend lacks locking, compare-and-swap") || !strings.Contains(errOut, "--allow-unsafe-state") || srv.puts != 0 {
		t.Fatalf("rm without --allow-unsafe-state: exit %d %q, %d PUTs; want a refusal naming the missing capabilities and no PUT", code, errOut, srv.puts)
	}
	if out, errOut, code := runCLI(t, dir, "", "state", "rm", "--allow-unsafe-state", "sysbox_node.db"); code != 0 || !strings.Contains(out, "Removed sysbox_node.db") {
		t.Fatalf("rm with --allow-unsafe-state: exit %d %q %q", code, out, errOut)
	}
	got, err := states.Decode(srv.doc)
	if err != nil || got.Serial != 2 || len(got.Resources) != 1 {
		t.Fatalf("stored after rm: %v serial %d, want serial 2 with one resource", err, got.Serial)
	}
}
