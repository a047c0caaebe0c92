package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/vishvananda/netlink"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

func TestDaemonArtifacts(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	for _, kind := range []string{"rootfs", "docker-archive", "oci-layout"} {
		t.Run(kind, func(t *testing.T) {
			marker := "artifact-" + kind + "-" + randHex(6)
			path := testImage(t, kind, marker)
			want, size, err := hashFile(path)
			if err != nil {
				t.Fatal(err)
			}
			specKind := KindOCIImage
			if kind == "rootfs" {
				specKind = KindRootfs
			}
			spec := substrate.ArtifactSpec{Kind: specKind, Source: path, GuestFamily: "busybox"}
			id, err := d.ResolveArtifact(ctx, spec)
			if err != nil {
				t.Fatalf("ResolveArtifact: %v", err)
			}
			t.Cleanup(func() { _, _ = d.cli.ImageRemove(ctx, id.Ref, image.RemoveOptions{Force: true, PruneChildren: true}) })
			if id.Digest != want || id.Size != size || id.Kind != specKind || id.Source != path || id.GuestFamily != "busybox" || id.Architecture == "" || !strings.HasPrefix(id.Ref, "sha256:") {
				t.Fatalf("identity: got %+v, want digest %s size %d kind %s", id, want, size, specKind)
			}
			img, err := d.cli.ImageInspect(ctx, id.Ref)
			if err != nil {
				t.Fatalf("inspect loaded image: %v", err)
			}
			if !contains(img.RepoTags, artifactTag(want)) {
				t.Fatalf("image tags: got %v, want %s", img.RepoTags, artifactTag(want))
			}

			again, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: specKind, Source: path, Digest: want, GuestFamily: "busybox"})
			if err != nil || again != id {
				t.Fatalf("second resolve with the right pin: got %+v, %v; want %+v", again, err, id)
			}
			if err := d.VerifyArtifact(ctx, id); err != nil {
				t.Fatalf("VerifyArtifact: %v", err)
			}

			_, err = d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: specKind, Source: path, Digest: "sha256:" + strings.Repeat("ab", 32)})
			wantErrIs(t, "resolve with a wrong pin", err, driver.ErrDigestMismatch)

			// An identity that kept only the digest still verifies against the content tag.
			noRef := id
			noRef.Ref = ""
			if err := d.VerifyArtifact(ctx, noRef); err != nil {
				t.Fatalf("VerifyArtifact(digest only): %v", err)
			}
			// A recorded image that is gone, or another image behind the content tag: refused.
			bad := id
			bad.Ref = "sha256:" + strings.Repeat("0", 64)
			wantErrIs(t, "VerifyArtifact(gone ref)", d.VerifyArtifact(ctx, bad), driver.ErrNotFound)
			other := resolveTestImage(t, d, "rootfs", "other-"+marker)
			bad.Ref = other.Ref
			wantErrIs(t, "VerifyArtifact(other image)", d.VerifyArtifact(ctx, bad), driver.ErrDigestMismatch)
			unloaded := id
			unloaded.Digest, unloaded.Ref, unloaded.Source = "sha256:"+strings.Repeat("1", 64), "", "elsewhere.tar"
			wantErrIs(t, "VerifyArtifact(digest never loaded)", d.VerifyArtifact(ctx, unloaded), driver.ErrNotFound)
			// The archive on disk changes: verification refuses.
			if err := os.WriteFile(path, []byte("tampered"), 0o644); err != nil {
				t.Fatal(err)
			}
			wantErrIs(t, "VerifyArtifact(tampered archive)", d.VerifyArtifact(ctx, id), driver.ErrDigestMismatch)
			// An archive that is there but cannot be hashed refuses (it used to fall back to the
			// image tag and pass); only a missing archive falls back to the tag.
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := d.VerifyArtifact(ctx, id); err == nil || !strings.Contains(err.Error(), "cannot re-hash") {
				t.Fatalf("VerifyArtifact(archive is a directory): got %v, want a refusal", err)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := d.VerifyArtifact(ctx, id); err != nil {
				t.Fatalf("VerifyArtifact(archive removed, image still tagged): got %v, want the tag fallback", err)
			}
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestDaemonLifecycleWithLabels(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", topo)
	owner := testOwner(topo, "web")
	spec := substrate.NodeSpec{Owner: owner, Driver: Name, Artifact: &art, Command: []string{"sleep", "3600"}, Hostname: "web", CPUs: 1, MemoryMB: 64}

	h, err := d.CreateNode(ctx, spec)
	if err != nil {
		t.Fatalf("CreateNode: %v", err)
	}
	if err := d.CheckPrivate(h.Private); err != nil {
		t.Fatalf("CheckPrivate(new handle): %v", err)
	}
	ins, err := d.cli.ContainerInspect(ctx, h.ExternalID)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range ownerLabels(owner) {
		if ins.Config.Labels[k] != v {
			t.Errorf("label %s: got %q, want %q", k, ins.Config.Labels[k], v)
		}
	}
	if ins.HostConfig.NanoCPUs != 1e9 || ins.HostConfig.Memory != 64<<20 || ins.Config.Hostname != "web" {
		t.Errorf("container resources: got %d nano-CPUs, %d bytes, hostname %q; want 1e9, 64 MiB, web", ins.HostConfig.NanoCPUs, ins.HostConfig.Memory, ins.Config.Hostname)
	}
	if ins.HostConfig.NetworkMode != "none" || ins.Name != "/"+containerName(owner) {
		t.Errorf("container: got network mode %q name %q, want none and /%s", ins.HostConfig.NetworkMode, ins.Name, containerName(owner))
	}
	// A retried create adopts the container it made.
	h2, err := d.CreateNode(ctx, spec)
	if err != nil || h2.ExternalID != h.ExternalID {
		t.Fatalf("retried CreateNode: got %s, %v; want %s", h2.ExternalID, err, h.ExternalID)
	}

	steps := []struct {
		name string
		do   func() error
		want substrate.Status
	}{
		{"created", func() error { return nil }, substrate.Degraded},
		{"started", func() error { return d.StartNode(ctx, h, spec) }, substrate.Present},
		{"started again", func() error { return d.StartNode(ctx, h, spec) }, substrate.Present},
		{"stopped", func() error { return d.StopNode(ctx, h, owner) }, substrate.Degraded},
		{"restarted", func() error { return d.StartNode(ctx, h, spec) }, substrate.Present},
		{"paused behind our back", func() error { return d.cli.ContainerPause(ctx, h.ExternalID) }, substrate.Degraded},
		{"unpaused", func() error { return d.cli.ContainerUnpause(ctx, h.ExternalID) }, substrate.Present},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		obs, err := d.ObserveNode(ctx, h, owner)
		if err != nil || obs.Status != s.want {
			t.Fatalf("%s: ObserveNode got %s (%s), %v; want %s", s.name, obs.Status, obs.Reason, err, s.want)
		}
	}

	// Someone else's owner (another generation, another topology) cannot stop or delete it.
	for _, other := range []substrate.Owner{
		{Topology: topo, Address: owner.Address, Type: owner.Type, Generation: 2},
		testOwner("other-"+topo, "web"),
	} {
		wantErrIs(t, "StopNode(other owner)", d.StopNode(ctx, h, other), driver.ErrNotOwned)
		wantErrIs(t, "DeleteNode(other owner)", d.DeleteNode(ctx, h, other), driver.ErrNotOwned)
		obs, _ := d.ObserveNode(ctx, h, owner)
		if obs.Status != substrate.Present {
			t.Fatalf("after refused delete: got %s (%s), want present", obs.Status, obs.Reason)
		}
		if obs2, _ := d.ObserveNode(ctx, h, other); obs2.Status != substrate.Drifted {
			t.Fatalf("ObserveNode(other owner): got %s, want drifted", obs2.Status)
		}
	}

	res, err := d.Residue(ctx, topo)
	if err != nil || len(res) != 1 || res[0].Kind != "container" || res[0].ExternalID != h.ExternalID || !res[0].Owner.Equal(owner) {
		t.Fatalf("Residue before delete: got %+v, %v; want the one container", res, err)
	}
	if err := d.DeleteNode(ctx, h, owner); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if err := d.DeleteNode(ctx, h, owner); err != nil {
		t.Fatalf("DeleteNode again: got %v, want nil (already gone)", err)
	}
	obs, err := d.ObserveNode(ctx, h, owner)
	if err != nil || obs.Status != substrate.Absent {
		t.Fatalf("after delete: got %s, %v; want absent", obs.Status, err)
	}
	if res, err := d.Residue(ctx, topo); err != nil || len(res) != 0 {
		t.Fatalf("Residue after delete: got %+v, %v; want none", res, err)
	}
}

func TestDaemonForeignContainerWithOurNameIsLeftAlone(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", topo)
	owner := testOwner(topo, "web")

	// Someone else made a container with exactly the name sysbox would use, and no markers.
	foreign, err := d.cli.ContainerCreate(ctx, &container.Config{Image: art.Ref, Cmd: []string{"sleep", "3600"},
		Labels: map[string]string{"purpose": "not sysbox"}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, containerName(owner))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.cli.ContainerRemove(ctx, foreign.ID, container.RemoveOptions{Force: true}) })
	if err := d.cli.ContainerStart(ctx, foreign.ID, container.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := d.cli.ContainerInspect(ctx, foreign.ID)
	if err != nil {
		t.Fatal(err)
	}

	_, err = d.CreateNode(ctx, substrate.NodeSpec{Owner: owner, Driver: Name, Artifact: &art, Command: []string{"sleep", "1"}})
	wantErrIs(t, "CreateNode over a foreign name", err, driver.ErrNotOwned)
	fh := nodeHandle(nodePrivate{ContainerID: foreign.ID, Marker: owner.Marker()})
	wantErrIs(t, "DeleteNode(foreign)", d.DeleteNode(ctx, fh, owner), driver.ErrNotOwned)
	wantErrIs(t, "StopNode(foreign)", d.StopNode(ctx, fh, owner), driver.ErrNotOwned)
	_, err = d.ImportNode(ctx, foreign.ID, owner)
	wantErrIs(t, "ImportNode(foreign)", err, driver.ErrNotOwned)
	_, err = d.NewGeneration(ctx, fh, owner, substrate.NodeSpec{Owner: substrate.Owner{Topology: topo, Address: owner.Address, Type: owner.Type, Generation: 2}, Artifact: &art})
	wantErrIs(t, "NewGeneration(foreign prior)", err, driver.ErrNotOwned)

	after, err := d.cli.ContainerInspect(ctx, foreign.ID)
	if err != nil {
		t.Fatalf("foreign container after our calls: %v", err)
	}
	if !after.State.Running || after.State.StartedAt != before.State.StartedAt || after.State.Pid != before.State.Pid {
		t.Fatalf("foreign container was touched: state before %+v, after %+v", before.State, after.State)
	}
	if res, err := d.Residue(ctx, topo); err != nil || len(res) != 0 {
		t.Fatalf("Residue: got %+v, %v; want none (the foreign container is not ours)", res, err)
	}
}

func TestDaemonExecAndSecrets(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "docker-archive", topo)
	owner := testOwner(topo, "box")
	const secret = "s3cr3t-value-for-test"
	spec := substrate.NodeSpec{Owner: owner, Driver: Name, Artifact: &art, Command: []string{"sleep", "3600"},
		Environment: map[string]string{"API_TOKEN": secret}}
	h, err := d.CreateNode(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h, spec); err != nil {
		t.Fatal(err)
	}
	enc, _ := json.Marshal(h)
	if strings.Contains(string(enc), secret) {
		t.Fatalf("handle holds the secret: %s", enc)
	}
	if obs, _ := d.ObserveNode(ctx, h, owner); strings.Contains(fmt.Sprint(obs), secret) {
		t.Fatalf("observation holds the secret: %+v", obs)
	}

	tests := []struct {
		name       string
		req        substrate.ExecRequest
		wantExit   int
		wantStdout string
		wantStderr string
	}{
		{"env from the node", substrate.ExecRequest{Argv: []string{"sh", "-c", "echo $API_TOKEN"}}, 0, secret + "\n", ""},
		{"env of the call", substrate.ExecRequest{Argv: []string{"sh", "-c", "echo $X"}, Env: map[string]string{"X": "y"}}, 0, "y\n", ""},
		{"stdin", substrate.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("hello\n")}, 0, "hello\n", ""},
		{"exit code and stderr", substrate.ExecRequest{Argv: []string{"sh", "-c", "echo oops >&2; exit 7"}}, 7, "", "oops\n"},
		{"file from the image", substrate.ExecRequest{Argv: []string{"cat", "/www/index.html"}}, 0, topo, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := d.Exec(ctx, h, tt.req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if res.ExitCode != tt.wantExit || string(res.Stdout) != tt.wantStdout || string(res.Stderr) != tt.wantStderr {
				t.Fatalf("Exec: got exit %d stdout %q stderr %q; want %d %q %q", res.ExitCode, res.Stdout, res.Stderr, tt.wantExit, tt.wantStdout, tt.wantStderr)
			}
		})
	}
	_, err = d.Exec(ctx, h, substrate.ExecRequest{Argv: []string{"sleep", "417"}, Timeout: 300 * time.Millisecond})
	wantErrIs(t, "Exec past its timeout", err, context.DeadlineExceeded)
	if res, err := d.Exec(ctx, h, substrate.ExecRequest{Argv: []string{"ps"}}); err != nil || strings.Contains(string(res.Stdout), "sleep 417") {
		t.Fatalf("after the timed-out exec: ps got %q, %v; want no sleep 417 left running", res.Stdout, err)
	}
	if err := d.DeleteNode(ctx, h, owner); err != nil {
		t.Fatal(err)
	}
}

func TestDaemonImport(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", topo)
	owner := testOwner(topo, "legacy")
	labels := ownerLabels(owner)
	delete(labels, labelMarker) // hand-made: the anchors only
	mk := func(name string, labels map[string]string, mode string) string {
		c, err := d.cli.ContainerCreate(ctx, &container.Config{Image: art.Ref, Cmd: []string{"sleep", "3600"}, Labels: labels},
			&container.HostConfig{NetworkMode: container.NetworkMode(mode)}, nil, nil, name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true}) })
		return c.ID
	}
	good := mk("sysbox-import-"+randHex(4), labels, "none")
	got, err := d.ImportNode(ctx, good, owner)
	if err != nil {
		t.Fatalf("ImportNode: %v", err)
	}
	if got.Handle.ExternalID != good || got.Handle.Driver != Name || d.CheckPrivate(got.Handle.Private) != nil {
		t.Fatalf("imported handle: got %+v", got.Handle)
	}
	p, _ := decodeNodePrivate(got.Handle.Private)
	if mo, _ := substrate.ParseMarker(p.Marker); !mo.Equal(owner) {
		t.Fatalf("imported marker: got %+v, want %+v", mo, owner)
	}
	if got.Artifact == nil || got.Artifact.Digest != art.Digest || got.Artifact.Ref != art.Ref || strings.Join(got.Command, " ") != "sleep 3600" {
		t.Fatalf("normalized import: got artifact %+v command %v; want digest %s ref %s, command sleep 3600", got.Artifact, got.Command, art.Digest, art.Ref)
	}
	if obs, err := d.ObserveNode(ctx, got.Handle, owner); err != nil || obs.Status != substrate.Degraded {
		t.Fatalf("observe imported (not running): got %s (%s), %v; want degraded", obs.Status, obs.Reason, err)
	}

	otherAddr := ownerLabels(testOwner(topo, "someone-else"))
	bridged := mk("sysbox-import-"+randHex(4), labels, "bridge")
	noGen := map[string]string{labelTopology: topo, labelAddress: owner.Address, labelType: owner.Type}
	gen4 := ownerLabels(owner)
	delete(gen4, labelMarker)
	gen4[labelGeneration] = "4"
	for _, tt := range []struct {
		name string
		id   string
		want error
	}{
		{"labels of another address", mk("sysbox-import-"+randHex(4), otherAddr, "none"), driver.ErrNotOwned},
		{"no generation label", mk("sysbox-import-"+randHex(4), noGen, "none"), driver.ErrNotOwned},
		{"another generation", mk("sysbox-import-"+randHex(4), gen4, "none"), driver.ErrNotOwned},
		{"docker-managed network", bridged, driver.ErrInvalid},
		{"no such container", "sysbox-no-such-" + randHex(4), driver.ErrNotFound},
	} {
		_, err := d.ImportNode(ctx, tt.id, owner)
		wantErrIs(t, "ImportNode("+tt.name+")", err, tt.want)
	}
}

// httpGet fetches url. The timeout is generous: every caller expects an answer, and a loaded
// CI host can stall the exchange for seconds.
func httpGet(url string) (string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// httpGetReady is httpGet retried while the server is not yet listening (connection refused),
// until timeout: starting a container returns before its httpd has bound its port. Any other
// error, or a wrong body, is returned at once.
func httpGetReady(url string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		body, err := httpGet(url)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || time.Now().After(deadline) {
			return body, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// untilServing runs an in-guest HTTP exchange again while it fails with "Connection refused"
// (the server's node is started but its httpd has not bound its port yet), for up to 30 s.
func untilServing(run func() (substrate.ExecResult, error)) (substrate.ExecResult, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := run()
		if err == nil && res.ExitCode == 0 || !strings.Contains(string(res.Stderr)+string(res.Stdout), "Connection refused") || time.Now().After(deadline) {
			return res, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDaemonWiringResetAndDestroy wires two busybox httpd containers to a Linux bridge, checks
// traffic and observation, resets one while the other keeps serving, and destroys everything,
// leaving no container, link or rule.
func TestDaemonWiringResetAndDestroy(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "oci-layout", topo)
	net := testBridge(t, topo, "198.51.100.1/24")

	type node struct {
		owner substrate.Owner
		h     substrate.Handle
		spec  substrate.NodeSpec
		att   substrate.AttachmentState
		ip    string
		mac   string
	}
	nodes := map[string]*node{
		"web1": {ip: "198.51.100.11", mac: "02:00:c6:33:64:0b"},
		"web2": {ip: "198.51.100.12", mac: "02:00:c6:33:64:0c"},
	}
	wire := func(name string, n *node) {
		t.Helper()
		st, err := d.Attach(ctx, n.h, substrate.AttachmentSpec{Owner: n.owner, Node: n.owner.Address, Name: "lan", Network: net,
			IPv4: []string{n.ip + "/24"}, MAC: n.mac, Gateway: "198.51.100.1"})
		if err != nil {
			t.Fatalf("Attach %s: %v", name, err)
		}
		if err := d.ConfigureGuestNetwork(ctx, n.h, []substrate.AttachmentState{st}, []substrate.Route{{To: "203.0.113.0/24", Via: "198.51.100.1"}}); err != nil {
			t.Fatalf("ConfigureGuestNetwork %s: %v", name, err)
		}
		n.att = st
	}
	for name, n := range nodes {
		n.owner = testOwner(topo, name)
		n.spec = substrate.NodeSpec{Owner: n.owner, Driver: Name, Artifact: &art, Command: []string{"httpd", "-f", "-p", "80", "-h", "/www"}}
		var err error
		if n.h, err = d.CreateNode(ctx, n.spec); err != nil {
			t.Fatal(err)
		}
		wire(name, n) // starts the created container
		if err := d.StartNode(ctx, n.h, n.spec); err != nil {
			t.Fatal(err)
		}
	}
	for name, n := range nodes {
		// A started container is not yet a listening httpd: wait for it, as a user would.
		if body, err := httpGetReady("http://"+n.ip+"/index.html", 30*time.Second); err != nil || body != topo {
			t.Fatalf("GET %s from the host: got %q, %v; want %q", name, body, err, topo)
		}
		if obs, err := d.ObserveAttachment(ctx, n.h, n.att, n.owner); err != nil || obs.Status != substrate.Present {
			t.Fatalf("ObserveAttachment %s: got %s (%s), %v; want present", name, obs.Status, obs.Reason, err)
		}
		if obs, err := d.ObserveNode(ctx, n.h, n.owner); err != nil || obs.Status != substrate.Present || obs.Attributes["nics"] != "1" {
			t.Fatalf("ObserveNode %s: got %+v, %v; want present with 1 NIC", name, obs, err)
		}
	}
	// Container to container across the bridge, and the routes we set.
	res, err := d.Exec(ctx, nodes["web2"].h, substrate.ExecRequest{Argv: []string{"wget", "-q", "-O", "-", "http://198.51.100.11/index.html"}, Timeout: 10 * time.Second})
	if err != nil || res.ExitCode != 0 || string(res.Stdout) != topo {
		t.Fatalf("web2 → web1: got exit %d %q %q, %v", res.ExitCode, res.Stdout, res.Stderr, err)
	}
	res, err = d.Exec(ctx, nodes["web1"].h, substrate.ExecRequest{Argv: []string{"ip", "route"}})
	if err != nil || !strings.Contains(string(res.Stdout), "default via 198.51.100.1") || !strings.Contains(string(res.Stdout), "203.0.113.0/24 via 198.51.100.1") {
		t.Fatalf("web1 routes: got %q, %v", res.Stdout, err)
	}
	// Import finds the wired NIC, normalized.
	imp, err := d.ImportNode(ctx, nodes["web1"].h.ExternalID, nodes["web1"].owner)
	if err != nil || len(imp.Attachments) != 1 || imp.Attachments[0].Name != "lan" || imp.Attachments[0].MAC != nodes["web1"].mac ||
		strings.Join(imp.Attachments[0].IPv4, ",") != "198.51.100.11/24" || imp.Attachments[0].Gateway != "198.51.100.1" {
		t.Fatalf("ImportNode(wired): got %+v, %v", imp.Attachments, err)
	}

	// Reset web1 while web2 keeps answering.
	var stop atomic.Bool
	var served, failed atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if body, err := httpGet("http://198.51.100.12/index.html"); err == nil && body == topo {
				served.Add(1)
			} else {
				failed.Add(1)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	w1 := nodes["web1"]
	prior, priorOwner := w1.h, w1.owner
	next := w1.spec
	next.Owner.Generation = 2
	nh, err := d.NewGeneration(ctx, prior, priorOwner, next)
	if err != nil {
		t.Fatalf("NewGeneration: %v", err)
	}
	if nh.ExternalID == prior.ExternalID {
		t.Fatalf("NewGeneration: external id unchanged %s", nh.ExternalID)
	}
	if obs, _ := d.ObserveAttachment(ctx, prior, w1.att, priorOwner); obs.Status == substrate.Present {
		t.Fatalf("prior generation's NIC after quiesce: got present, want it gone")
	}
	w1.h, w1.owner, w1.spec = nh, next.Owner, next
	wire("web1 gen 2", w1)
	if err := d.StartNode(ctx, w1.h, w1.spec); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, prior, priorOwner); err != nil {
		t.Fatalf("delete prior generation: %v", err)
	}
	stop.Store(true)
	wg.Wait()
	if failed.Load() != 0 || served.Load() == 0 {
		t.Fatalf("web2 during web1's reset: %d served, %d failed; want all served", served.Load(), failed.Load())
	}
	if body, err := httpGetReady("http://198.51.100.11/index.html", 30*time.Second); err != nil || body != topo {
		t.Fatalf("GET web1 after reset: got %q, %v", body, err)
	}
	if w1.att.MAC != "02:00:c6:33:64:0b" {
		t.Fatalf("web1 MAC after reset: got %s", w1.att.MAC)
	}
	if obs, err := d.ObserveAttachment(ctx, w1.h, w1.att, w1.owner); err != nil || obs.Status != substrate.Present {
		t.Fatalf("web1 attachment after reset: got %s (%s), %v", obs.Status, obs.Reason, err)
	}

	// Drift behind our back: host side down → degraded; restart → NIC absent; replaced → drifted.
	w2 := nodes["web2"]
	hp, _ := decodeNICPrivate(w2.att.Private)
	hl, err := netlink.LinkByName(hp.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetDown(hl); err != nil {
		t.Fatal(err)
	}
	if obs, _ := d.ObserveNode(ctx, w2.h, w2.owner); obs.Status != substrate.Degraded {
		t.Fatalf("ObserveNode(host side down): got %s (%s), want degraded", obs.Status, obs.Reason)
	}
	if obs, _ := d.ObserveAttachment(ctx, w2.h, w2.att, w2.owner); obs.Status != substrate.Degraded {
		t.Fatalf("ObserveAttachment(host side down): got %s (%s), want degraded", obs.Status, obs.Reason)
	}
	timeout := 1
	if err := d.cli.ContainerRestart(ctx, w2.h.ExternalID, container.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	if obs, _ := d.ObserveAttachment(ctx, w2.h, w2.att, w2.owner); obs.Status != substrate.Absent {
		t.Fatalf("ObserveAttachment(after restart behind our back): got %s (%s), want absent", obs.Status, obs.Reason)
	}
	if obs, _ := d.ObserveNode(ctx, w2.h, w2.owner); obs.Status != substrate.Degraded || !strings.Contains(obs.Reason, "lan") {
		t.Fatalf("ObserveNode(after restart behind our back): got %s (%s), want degraded naming attachment lan", obs.Status, obs.Reason)
	}
	// Wiring again converges.
	wire("web2 rewired", w2)
	if obs, _ := d.ObserveNode(ctx, w2.h, w2.owner); obs.Status != substrate.Present {
		t.Fatalf("ObserveNode(rewired): got %s (%s), want present", obs.Status, obs.Reason)
	}

	// Destroy: detach, delete; nothing of the topology remains.
	for name, n := range nodes {
		if err := d.Detach(ctx, n.h, n.att, n.owner); err != nil {
			t.Fatalf("Detach %s: %v", name, err)
		}
		if err := d.DeleteNode(ctx, n.h, n.owner); err != nil {
			t.Fatalf("DeleteNode %s: %v", name, err)
		}
	}
	if res, err := d.Residue(ctx, topo); err != nil || len(res) != 0 {
		t.Fatalf("Residue after destroy: got %+v, %v; want none", res, err)
	}
	links, err := hostMarkedLinks()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if l.Owner.Topology == topo {
			t.Fatalf("host link %s of the topology survived destroy", l.Name)
		}
	}
}

func TestDaemonReplacedContainerIsDrifted(t *testing.T) {
	d := daemonDriver(t)
	ctx := context.Background()
	topo := "test-" + randHex(8)
	cleanupTopology(t, d, topo)
	art := resolveTestImage(t, d, "rootfs", topo)
	owner := testOwner(topo, "web")
	h, _ := mustNode(t, d, owner, art, "sleep", "3600")
	// Someone removes it and runs a look-alike with the same labels.
	if err := d.cli.ContainerRemove(ctx, h.ExternalID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if obs, err := d.ObserveNode(ctx, h, owner); err != nil || obs.Status != substrate.Absent {
		t.Fatalf("ObserveNode(removed): got %s, %v; want absent", obs.Status, err)
	}
	c, err := d.cli.ContainerCreate(ctx, &container.Config{Image: art.Ref, Cmd: []string{"sleep", "3600"}, Labels: ownerLabels(owner)},
		&container.HostConfig{NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := d.ObserveNode(ctx, h, owner)
	if err != nil || obs.Status != substrate.Drifted || obs.ExternalID != c.ID {
		t.Fatalf("ObserveNode(replaced): got %s %s (%s), %v; want drifted naming %s", obs.Status, obs.ExternalID, obs.Reason, err, c.ID)
	}
}
