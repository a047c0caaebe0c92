package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// apiCounter is an HTTP transport that records every Engine API request as "METHOD route"
// (no version prefix, container ids folded to {id}) before passing it on.
type apiCounter struct {
	base  http.RoundTripper
	mu    sync.Mutex
	calls []string
}

var (
	versionInPathRE = regexp.MustCompile(`^/v[0-9.]+/`)
	idInPathRE      = regexp.MustCompile(`^/containers/[0-9a-f]{64}`)
)

func (c *apiCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	route := idInPathRE.ReplaceAllString(versionInPathRE.ReplaceAllString(r.URL.Path, "/"), "/containers/{id}")
	c.mu.Lock()
	c.calls = append(c.calls, r.Method+" "+route)
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

// take returns the calls recorded since the last take, sorted, and forgets them.
func (c *apiCounter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	sort.Strings(out)
	return out
}

// countingDriver returns a fresh driver (nothing remembered) on real's daemon whose API
// requests the returned counter records.
func countingDriver(t *testing.T, real *Driver) (*Driver, *apiCounter) {
	t.Helper()
	host := real.cli.DaemonHost()
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		t.Fatalf("daemon host %s: the counting transport dials unix sockets only", host)
	}
	c := &apiCounter{base: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithVersion(APIVersion), client.WithHTTPClient(&http.Client{Transport: c}))
	if err != nil {
		t.Fatal(err)
	}
	d := &Driver{cli: cli, stopTimeout: 2 * time.Second, stateDir: real.stateDir}
	t.Cleanup(func() { d.Close() })
	return d, c
}

func wantCalls(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	sort.Strings(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s: API calls\n got: %q\nwant: %q", what, got, want)
	}
}

// TestDaemonCallsPerContainer pins the Engine API calls per container: a fresh container is
// started and wired with one start and one inspect (its labels are known from its create), the
// executor's further wiring calls make none while its pid is still one of its processes (a
// stop or restart behind the driver's back makes them inspect again), and a destroy by a
// driver that has seen none of the containers checks their labels from one list of the
// topology, then removes each running container by id with one forced removal, without
// inspecting or stopping it first — while still refusing an owner the labels do not name, and
// inspecting a container the list did not show.
func TestDaemonCallsPerContainer(t *testing.T) {
	real := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, real, topo)
	art := resolveTestImage(t, real, "rootfs", topo)
	br := testBridge(t, topo, "")

	d, calls := countingDriver(t, real)
	var hs []substrate.Handle
	var owners []substrate.Owner
	for i := 0; i < 3; i++ {
		o := testOwner(topo, fmt.Sprintf("n%d", i))
		spec := substrate.NodeSpec{Owner: o, Driver: Name, Artifact: &art, Command: []string{"sleep", "3600"}}
		h, err := d.CreateNode(ctx, spec)
		if err != nil {
			t.Fatalf("CreateNode %s: %v", o.Address, err)
		}
		wantCalls(t, "CreateNode", calls.take(), "POST /containers/create")
		st, err := d.Attach(ctx, h, substrate.AttachmentSpec{Owner: o, Node: o.Address, Name: "lan", Network: br,
			IPv4: []string{fmt.Sprintf("198.51.100.%d/24", 10+i)}, Gateway: "198.51.100.1"})
		if err != nil {
			t.Fatalf("Attach %s: %v", o.Address, err)
		}
		wantCalls(t, "Attach of a fresh container", calls.take(),
			"POST /containers/{id}/start", "GET /containers/{id}/json")
		// The rest of the executor's wiring of a node, and its observation.
		if err := d.ConfigureGuestNetwork(ctx, h, []substrate.AttachmentState{st}, nil); err != nil {
			t.Fatalf("ConfigureGuestNetwork %s: %v", o.Address, err)
		}
		hosts := []driver.HostEntry{{Address: "198.51.100.1", Names: []string{"gw"}}}
		if err := d.SetHosts(ctx, h, o, hosts); err != nil {
			t.Fatalf("SetHosts %s: %v", o.Address, err)
		}
		if err := d.StartNode(ctx, h, spec); err != nil {
			t.Fatalf("StartNode %s: %v", o.Address, err)
		}
		if err := d.SetHosts(ctx, h, o, hosts); err != nil {
			t.Fatalf("SetHosts %s: %v", o.Address, err)
		}
		wantCalls(t, "configure, hosts, start, hosts of a running container", calls.take())
		obs, err := d.ObserveNode(ctx, h, o)
		if err != nil || obs.Status != substrate.Present {
			t.Fatalf("ObserveNode %s: got %s (%s), %v; want present", o.Address, obs.Status, obs.Reason, err)
		}
		wantCalls(t, "ObserveNode", calls.take(), "GET /containers/{id}/json")
		hs, owners = append(hs, h), append(owners, o)
	}

	// Stopped behind the driver's back: what it saw running is not trusted, it asks again.
	secs := 0
	if err := real.cli.ContainerStop(ctx, hs[0].ExternalID, container.StopOptions{Timeout: &secs}); err != nil {
		t.Fatal(err)
	}
	if err := d.ConfigureGuestNetwork(ctx, hs[0], nil, nil); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("ConfigureGuestNetwork of a container stopped behind the driver's back: got %v, want not running", err)
	}
	wantCalls(t, "ConfigureGuestNetwork after a stop behind the driver's back", calls.take(), "GET /containers/{id}/json")
	if err := real.cli.ContainerStart(ctx, hs[0].ExternalID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	r, err := d.ensureRunning(ctx, "start", hs[0], owners[0])
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, "StartNode after a restart behind the driver's back", calls.take(), "GET /containers/{id}/json")
	ins, err := real.cli.ContainerInspect(ctx, hs[0].ExternalID)
	if err != nil {
		t.Fatal(err)
	}
	if r.Pid != ins.State.Pid {
		t.Fatalf("after a restart behind the driver's back: driver uses pid %d, the container runs as %d", r.Pid, ins.State.Pid)
	}

	// A driver that has seen none of them (a new destroy run).
	d2, calls2 := countingDriver(t, real)
	other := owners[0]
	other.Generation = 2
	wantErrIs(t, "StopNode as another generation", d2.StopNode(ctx, hs[0], other), driver.ErrNotOwned)
	wantErrIs(t, "DeleteNode as another generation", d2.DeleteNode(ctx, hs[0], other), driver.ErrNotOwned)
	wantCalls(t, "refused stop and delete", calls2.take(), "GET /containers/json")
	// Created after that list: the driver has not seen its labels and inspects it.
	late := testOwner(topo, "late")
	hl, _ := mustNode(t, real, late, art, "sleep", "3600")
	for i, h := range append(hs, hl) {
		o := late
		if i < len(owners) {
			o = owners[i]
		}
		// The executor deletes without a stop first (DeleteStopsNode): the forced removal of
		// the running container is the one call.
		if err := d2.DeleteNode(ctx, h, o); err != nil {
			t.Fatalf("DeleteNode %s: %v", o.Address, err)
		}
		want := []string{"DELETE /containers/{id}"}
		if h.ExternalID == hl.ExternalID {
			want = append(want, "GET /containers/{id}/json")
		}
		wantCalls(t, "stop and delete of "+o.Address, calls2.take(), want...)
		obs, err := real.ObserveNode(ctx, h, o)
		if err != nil || obs.Status != substrate.Absent {
			t.Fatalf("%s after delete: got %s (%s), %v; want absent", o.Address, obs.Status, obs.Reason, err)
		}
	}
	res, err := real.Residue(ctx, topo)
	if err != nil || len(res) != 0 {
		t.Fatalf("residue after the deletes: got %+v, %v; want none", res, err)
	}
}

// TestOwnerCacheAnswersWithoutTheDaemon: an id whose labels were read is checked against them
// with no daemon at all (the driver's socket has no listener); a forgotten id, or one whose
// labels were incomplete, must be asked for again and so fails as unavailable.
func TestOwnerCacheAnswersWithoutTheDaemon(t *testing.T) {
	d := unreachableDriver(t)
	ctx := context.Background()
	o := substrate.Owner{Topology: "t", Address: "sysbox_node.a", Type: "sysbox_node", Generation: 1}
	id := strings.Repeat("ab", 32)
	h := nodeHandle(nodePrivate{ContainerID: id, Marker: o.Marker()})
	d.owners.remember(id, ownerLabels(o))
	if got, err := d.ownedID(ctx, "check", h, o); err != nil || got != id {
		t.Fatalf("ownedID by its owner: got %q, %v; want %s, nil", got, err, id)
	}
	for what, other := range map[string]substrate.Owner{
		"another generation": {Topology: "t", Address: o.Address, Type: o.Type, Generation: 2},
		"another address":    {Topology: "t", Address: "sysbox_node.b", Type: o.Type, Generation: 1},
		"another topology":   {Topology: "u", Address: o.Address, Type: o.Type, Generation: 1},
	} {
		if _, err := d.ownedID(ctx, "check", h, other); !errors.Is(err, driver.ErrNotOwned) {
			t.Errorf("ownedID as %s: got %v, want ErrNotOwned", what, err)
		}
	}
	// Stop reaches the daemon only after the check: unavailable, not "not owned".
	if err := d.StopNode(ctx, h, o); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("StopNode of a remembered container: got %v, want ErrUnavailable", err)
	}
	d.owners.forget(id)
	if _, err := d.ownedID(ctx, "check", h, o); !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("ownedID after forget: got %v, want ErrUnavailable (asked the daemon)", err)
	}
	incomplete := ownerLabels(o)
	delete(incomplete, labelGeneration)
	d.owners.remember(id, incomplete)
	if _, ok := d.owners.lookup(id); ok {
		t.Fatalf("labels without a generation were remembered as an owner")
	}
}
