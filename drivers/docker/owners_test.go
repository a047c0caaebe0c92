package docker

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// goneDaemon is an Engine API that holds no container: every list is empty and every call on
// a container id is 404 "No such container". It records the routes asked.
func goneDaemon(t *testing.T) (*Driver, func() []string) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var routes []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route := r.Method + " " + idInPathRE.ReplaceAllString(versionInPathRE.ReplaceAllString(r.URL.Path, "/"), "/containers/{id}")
		mu.Lock()
		routes = append(routes, route)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if route == "GET /containers/json" {
			w.Write([]byte("[]"))
			return
		}
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"message":"No such container"}`))
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	d, err := New(Options{Host: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := routes
		routes = nil
		return out
	}
}

// TestNotFoundForgetsRememberedContainer: a container the driver created, listed and saw
// running is removed behind its back (a long-lived host agent's driver). Until a call reaches
// the daemon the driver answers from memory; once the daemon says the id does not exist, the
// driver forgets the id (owner, fresh mark, running instance) and its topology's list, so the
// next ownership check asks the daemon again and gets not found, never "exists, owned".
// Before the fix the check kept answering owned from memory.
func TestNotFoundForgetsRememberedContainer(t *testing.T) {
	d, routes := goneDaemon(t)
	ctx := context.Background()
	o := substrate.Owner{Topology: "t", Address: "sysbox_node.a", Type: "sysbox_node", Generation: 1}
	id := strings.Repeat("ab", 32)
	h := nodeHandle(nodePrivate{ContainerID: id, Marker: o.Marker()})
	d.owners.remember(id, ownerLabels(o))
	d.owners.setFresh(id, true)
	d.owners.listed = map[string]bool{o.Topology: true}
	d.live.byID = map[string]running{id: {ID: id, Pid: 1}}

	if got, err := d.ownedID(ctx, "check", h, o); err != nil || got != id {
		t.Fatalf("ownedID from memory: got %q, %v; want %s, nil", got, err, id)
	}
	if r := routes(); len(r) != 0 {
		t.Fatalf("ownedID from memory asked the daemon: %q", r)
	}
	if err := d.StopNode(ctx, h, o); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("StopNode of a container removed behind the driver's back: got %v, want ErrNotFound", err)
	}
	routes()
	if _, ok := d.owners.lookup(id); ok {
		t.Error("the owner of an id the daemon does not know is still remembered")
	}
	if d.owners.isFresh(id) {
		t.Error("an id the daemon does not know is still marked fresh")
	}
	if d.owners.listed[o.Topology] {
		t.Error("the topology is still marked listed after one of its containers turned out gone")
	}
	if _, ok := d.live.byID[id]; ok {
		t.Error("the running instance of an id the daemon does not know is still remembered")
	}
	if _, err := d.ownedID(ctx, "check", h, o); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("ownedID after not found: got %v, want ErrNotFound", err)
	}
	wantCalls(t, "ownedID after not found", routes(), "GET /containers/json", "GET /containers/{id}/json")
}
