package firecracker

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"zyvor.dev/sysbox/pkg/substrate"
)

// startedNode creates, attaches (one NIC with address ip on the test bridge), configures and
// starts o's generation; for generation > 1 it is a reset of prior.
func (e *kernelEnv) startedNode(t *testing.T, o substrate.Owner, prior *substrate.Handle, priorOwner substrate.Owner, ip string) substrate.Handle {
	t.Helper()
	ctx := context.Background()
	spec := e.art.spec(o)
	var h substrate.Handle
	var err error
	if prior == nil {
		h, err = e.d.CreateNode(ctx, spec)
	} else {
		h, err = e.d.NewGeneration(ctx, *prior, priorOwner, spec)
	}
	must(t, err)
	st, err := e.d.Attach(ctx, h, substrate.AttachmentSpec{Owner: o, Node: o.Address, Name: "eth0", Network: e.br,
		IPv4: []string{ip + "/24"}, MAC: "02:00:c6:12:07:0a"})
	must(t, err)
	must(t, e.d.ConfigureGuestNetwork(ctx, h, []substrate.AttachmentState{st}, nil))
	must(t, e.d.StartNode(ctx, h, spec))
	return h
}

func (e *kernelEnv) ops(t *testing.T, from int) []string {
	t.Helper()
	var ops []string
	for _, r := range e.requests(t)[from:] {
		op := r.Method + " " + r.Path
		if r.Status >= 300 {
			op += " refused"
		}
		ops = append(ops, op)
	}
	return ops
}

func (e *kernelEnv) guestHas(t *testing.T, h substrate.Handle, ip string) {
	t.Helper()
	res, err := e.d.Exec(context.Background(), h, substrate.ExecRequest{Argv: []string{"ip", "-4", "-o", "addr", "show", "dev", "eth0"}})
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Stdout), "inet "+ip+"/24") {
		t.Fatalf("guest of %s: got %q %q exit %d, %v; want inet %s/24", h.ExternalID, res.Stdout, res.Stderr, res.ExitCode, err, ip)
	}
}

func gen(o substrate.Owner, g uint64) substrate.Owner {
	o.Generation = g
	return o
}

// TestResetFastPath: a cold boot snapshots its booted baseline; the reset restores it into the
// next generation's fresh process (load with its own TAP and vsock, the root drive moved onto
// its own disk, resume; no InstanceStart), deletes the snapshot once loaded, and the guest
// answers with its address. The restored generation takes no snapshot, so the reset after it
// boots cold again.
func TestResetFastPath(t *testing.T) {
	e := newKernelEnv(t)
	ctx := context.Background()
	o1 := e.owner("vm")
	h1 := e.startedNode(t, o1, nil, substrate.Owner{}, "198.18.7.10")
	r1, err := e.d.readRecord(h1.ExternalID)
	must(t, err)
	if r1.Snapshot == nil || !snapshotComplete(filepath.Join(e.d.nodeDir(r1.Name), snapshotDir)) {
		t.Fatalf("generation 1 after a cold boot: snapshot %+v; want a complete snapshot", r1.Snapshot)
	}

	before := len(e.requests(t))
	o2 := gen(o1, 2)
	h2 := e.startedNode(t, o2, &h1, o1, "198.18.7.10")
	want := []string{
		"GET /",                // the fresh process answers; no pre-boot configuration
		"GET /",                // attach: pre-boot check (the TAP is the load's network override)
		"GET /",                // guest network: recorded
		"GET /",                // start
		"PUT /snapshot/load",   // network_overrides, vsock_override; stays Paused
		"PATCH /drives/rootfs", // onto generation 2's own disk
		"PATCH /vm",            // Resumed
	}
	if got := e.ops(t, before); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("reset requests:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	reqs := e.requests(t)[before:]
	var load SnapshotLoad
	must(t, json.Unmarshal(reqs[4].Body, &load))
	if len(load.NetworkOverrides) != 1 || load.NetworkOverrides[0].HostDevName != TAPName(o2, "eth0") ||
		load.VsockOverride == nil || load.VsockOverride.UDSPath != filepath.Join(e.d.nodeDir(h2.ExternalID), vsockFile) || load.ResumeVM {
		t.Fatalf("snapshot load %+v: want generation 2's TAP and uds_path, not resumed", load)
	}
	e.guestHas(t, h2, "198.18.7.10")
	r1, err = e.d.readRecord(h1.ExternalID)
	must(t, err)
	r2, err := e.d.readRecord(h2.ExternalID)
	must(t, err)
	if r1.Snapshot != nil || r2.Restore != nil || r2.Snapshot != nil {
		t.Fatalf("after the restore: generation 1 snapshot %+v, generation 2 restore %+v snapshot %+v; want none", r1.Snapshot, r2.Restore, r2.Snapshot)
	}
	for _, p := range []string{filepath.Join(e.d.nodeDir(h1.ExternalID), snapshotDir), filepath.Join(e.d.nodeDir(h2.ExternalID), restoreDir)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Fatalf("%s after the restore: %v; want it gone (a snapshot is loaded once)", p, err)
		}
	}
	if r2.Rootfs == r1.Rootfs {
		t.Fatalf("generation 2 runs on generation 1's disk %s", r1.Rootfs)
	}
	must(t, e.d.DeleteNode(ctx, h1, o1))

	// Generation 3: generation 2 has no snapshot, so it boots cold and snapshots again.
	before = len(e.requests(t))
	o3 := gen(o1, 3)
	h3 := e.startedNode(t, o3, &h2, o2, "198.18.7.10")
	got := strings.Join(e.ops(t, before), "\n")
	for _, w := range []string{"PUT /machine-config", "PUT /actions", "PUT /snapshot/create"} {
		if !strings.Contains(got, w) {
			t.Fatalf("reset after a restored generation:\n%s\nwant a cold boot with %s", got, w)
		}
	}
	if strings.Contains(got, "/snapshot/load") {
		t.Fatalf("reset after a restored generation loaded a snapshot:\n%s", got)
	}
	e.guestHas(t, h3, "198.18.7.10")
}

// TestResetColdFallback: a snapshot the VMM refuses to load (its recorded drive is gone) makes
// the generation boot cold from a fresh baseline copy, in a new process, and it still answers.
func TestResetColdFallback(t *testing.T) {
	e := newKernelEnv(t)
	ctx := context.Background()
	o1 := e.owner("vm")
	h1 := e.startedNode(t, o1, nil, substrate.Owner{}, "198.18.7.20")
	r1, err := e.d.readRecord(h1.ExternalID)
	must(t, err)
	o2 := gen(o1, 2)
	spec2 := e.art.spec(o2)
	h2, err := e.d.NewGeneration(ctx, h1, o1, spec2)
	must(t, err)
	r2, err := e.d.readRecord(h2.ExternalID)
	must(t, err)
	if r2.Restore == nil {
		t.Fatal("generation 2 does not restore generation 1's snapshot")
	}
	// Firecracker reopens the snapshot's drive path at load: take it away.
	must(t, e.d.StopNode(ctx, h1, o1))
	must(t, os.Remove(r1.Rootfs))
	st, err := e.d.Attach(ctx, h2, substrate.AttachmentSpec{Owner: o2, Node: o2.Address, Name: "eth0", Network: e.br,
		IPv4: []string{"198.18.7.20/24"}, MAC: "02:00:c6:12:07:0a"})
	must(t, err)
	must(t, e.d.ConfigureGuestNetwork(ctx, h2, []substrate.AttachmentState{st}, nil))
	before := len(e.requests(t))
	must(t, e.d.StartNode(ctx, h2, spec2))
	want := []string{
		"GET /", "PUT /snapshot/load refused", // the restore fails ...
		"GET /", "PUT /machine-config", "PUT /boot-source", "PUT /drives/rootfs", "PUT /network-interfaces/eth0", // ... a fresh process, cold
		"PUT /vsock", "PUT /actions",
		"PATCH /vm", "PUT /snapshot/create", "PATCH /vm", // a cold boot snapshots for the next reset
	}
	if got := e.ops(t, before); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("fallback requests:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	e.guestHas(t, h2, "198.18.7.20")
	r2, err = e.d.readRecord(h2.ExternalID)
	must(t, err)
	if r2.Restore != nil || fileDigest(t, r2.Rootfs) != e.art.rootfs.Digest {
		t.Fatalf("after the fallback: restore %+v, disk %s; want no restore and a baseline copy", r2.Restore, fileDigest(t, r2.Rootfs))
	}
	if _, err := os.Stat(filepath.Join(e.d.nodeDir(h2.ExternalID), restoreDir)); !os.IsNotExist(err) {
		t.Fatalf("restore directory after the fallback: %v; want it gone", err)
	}
}
