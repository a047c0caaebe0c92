package libvirt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// netnsNode is a network namespace with one veth on bridge at addr (what a netns node is).
func netnsNode(t *testing.T, topology, bridge, addr string) string {
	t.Helper()
	name := "sbvn" + randHex(4)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	o := substrate.Owner{Topology: topology, Address: "sysbox_node.peer", Type: "sysbox_node", Generation: 1}
	host := "sbvh" + randHex(4)
	if _, err := linuxnet.CreateVeth(context.Background(), linuxnet.VethSpec{HostName: host, Bridge: bridge,
		Netns: linuxnet.NamedNetns(name), NodeName: "eth0", IPv4: []string{addr}, Owner: o}); err != nil {
		t.Fatalf("veth into %s: %v", name, err)
	}
	t.Cleanup(func() { _ = linuxnet.DeleteVeth(context.Background(), host, o) })
	return name
}

// guestRun runs argv in the guest and fails unless it exits 0.
func guestRun(t *testing.T, d *Driver, h substrate.Handle, argv ...string) string {
	t.Helper()
	res, err := d.Exec(context.Background(), h, substrate.ExecRequest{Argv: argv, Timeout: 30 * time.Second})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec %q in the guest: exit %d, %v; stdout %q stderr %q", argv, res.ExitCode, err, res.Stdout, res.Stderr)
	}
	return string(res.Stdout)
}

// pingFromNetns pings to from the namespace until one reply comes back, for up to 30 s: a TCG
// guest on a loaded host can miss a single ping's wait.
func pingFromNetns(t *testing.T, ns, to string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		out, err := exec.Command("ip", "netns", "exec", ns, "busybox", "ping", "-c", "1", "-W", "5", to).CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping %s from netns %s: %v: %s", to, ns, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// guestPing pings to from the guest until one reply comes back, for up to 30 s.
func guestPing(t *testing.T, d *Driver, h substrate.Handle, to string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		res, err := d.Exec(context.Background(), h, substrate.ExecRequest{Argv: []string{"ping", "-c", "1", "-W", "5", to}, Timeout: 30 * time.Second})
		if err == nil && res.ExitCode == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping %s from the guest: exit %d, %v; stdout %q stderr %q", to, res.ExitCode, err, res.Stdout, res.Stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestVMExecTrafficAndReset boots a real guest (TCG) from scripts/guest-image (direct kernel
// boot, root on an overlay of disk.qcow2, the agent cmd/sysbox-guest), on a sysbox bridge beside a netns node: readiness, exec and guest network
// configuration go through the agent; the VM and the netns node ping each other; a reset brings
// up a new generation on a new overlay of the same baseline with the same MAC and address, and
// the prior generation is removed only after the new one answered its agent.
func TestVMExecTrafficAndReset(t *testing.T) {
	d := daemonDriver(t, 180*time.Second) // TCG boots take 4-8 s alone, far longer on a loaded host
	ctx := context.Background()
	img := testenv.GuestImage(t)
	disk, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: KindQCOW2, Source: filepath.Join(img, "disk.qcow2")})
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: KindKernel, Source: img})
	if err != nil {
		t.Fatal(err)
	}
	topo := "vmtest-" + randHex(6)
	cleanupTopology(t, d, topo)
	br := testBridge(t, topo, "")
	peer := netnsNode(t, topo, br.ExternalID, "198.51.100.20/24")

	o1 := substrate.Owner{Topology: topo, Address: "sysbox_node.vm", Type: "sysbox_node", Generation: 1}
	spec := func(o substrate.Owner) substrate.NodeSpec {
		return substrate.NodeSpec{Owner: o, Driver: Name, Artifact: &disk, Kernel: &kernel, MemoryMB: 256,
			Command: []string{"console=ttyS0", "panic=-1", "quiet"}}
	}
	att := substrate.AttachmentSpec{Node: o1.Address, Name: "eth0", Network: br, IPv4: []string{"198.51.100.10/24"}, MAC: "02:00:c6:33:64:0a",
		Gateway: "198.51.100.1"}
	bringUp := func(h substrate.Handle, o substrate.Owner) substrate.AttachmentState {
		t.Helper()
		a := att
		a.Owner = o
		st, err := d.Attach(ctx, h, a)
		if err != nil {
			t.Fatalf("Attach (generation %d): %v", o.Generation, err)
		}
		if err := d.ConfigureGuestNetwork(ctx, h, []substrate.AttachmentState{st}, nil); err != nil {
			t.Fatalf("ConfigureGuestNetwork (generation %d): %v%s", o.Generation, err, consoleTail(d, o))
		}
		if err := d.StartNode(ctx, h, spec(o)); err != nil {
			t.Fatalf("StartNode (generation %d): %v", o.Generation, err)
		}
		return st
	}
	h1, err := d.CreateNode(ctx, spec(o1))
	if err != nil {
		t.Fatal(err)
	}
	// libvirtd reports this domain's agent connected (the event that ends a readiness wait's
	// pause; without it the wait still ends, a poll later).
	c, dom, err := d.lookup(ctx, h1)
	if err != nil {
		t.Fatal(err)
	}
	wake, stopWake := agentWake(ctx, c, dom, nil)
	bringUp(h1, o1)
	select {
	case <-wake:
	case <-time.After(time.Minute):
		t.Errorf("no agent-connected event for domain %s within a minute of its agent answering", dom.Name)
	}
	stopWake()
	if got := strings.TrimSpace(guestRun(t, d, h1, "hostname")); got != "sysbox-guest" {
		t.Errorf("hostname in the guest: %q, want sysbox-guest", got)
	}
	res, err := d.Exec(ctx, h1, substrate.ExecRequest{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 4"}, Stdin: []byte("from stdin\n")})
	if err != nil || res.ExitCode != 4 || string(res.Stdout) != "from stdin\n" || string(res.Stderr) != "err\n" {
		t.Errorf("exec with stdin: %+v (stdout %q stderr %q), %v; want exit 4, stdin echoed, err on stderr", res, res.Stdout, res.Stderr, err)
	}
	guestPing(t, d, h1, "198.51.100.20")
	pingFromNetns(t, peer, "198.51.100.10")
	if err := d.SetHosts(ctx, h1, o1, []driver.HostEntry{{Address: "198.51.100.20", Names: []string{"peer", "peer.lab"}}}); err != nil {
		t.Fatalf("SetHosts: %v", err)
	}
	if err := d.SetHosts(ctx, h1, o1, []driver.HostEntry{{Address: "198.51.100.20", Names: []string{"peer"}}}); err != nil {
		t.Fatalf("SetHosts again: %v", err)
	}
	if hosts := guestRun(t, d, h1, "cat", "/etc/hosts"); !strings.Contains(hosts, "198.51.100.20\tpeer\n") ||
		strings.Contains(hosts, "peer.lab") || strings.Count(hosts, linuxnet.HostsMarkerPrefix) != 1 {
		t.Errorf("guest /etc/hosts after SetHosts twice:\n%s", hosts)
	}
	obs, err := d.ObserveNode(ctx, h1, o1)
	if err != nil || obs.Status != substrate.Present || obs.Attributes["domain_type"] != TypeQEMU {
		t.Fatalf("ObserveNode: %s (%s) %v, %v; want present, domain type qemu", obs.Status, obs.Reason, obs.Attributes, err)
	}
	if got := obs.Attributes["started_from"]; got != "cold" {
		t.Errorf("generation 1 started_from %q, want cold", got)
	}
	if _, err := os.Stat(d.snapBase(o1) + ".json"); err != nil {
		t.Fatalf("no baseline snapshot after the first start: %v (%s)", err, obs.Attributes["started_from"])
	}

	// Import of the running generation: normalized from the definition, the backing chain and
	// the guest agent (addresses and the default route's gateway).
	checkImport := func(h substrate.Handle, o substrate.Owner) {
		t.Helper()
		imp, err := d.ImportNode(ctx, h.ExternalID, o)
		if err != nil {
			t.Fatalf("ImportNode(generation %d): %v", o.Generation, err)
		}
		if imp.Artifact == nil || imp.Artifact.Digest != disk.Digest || imp.Kernel == nil || imp.Kernel.Digest != kernel.Digest ||
			strings.Join(imp.Command, " ") != "console=ttyS0 panic=-1 quiet" || imp.MemoryMB != 256 || imp.CPUs != 1 {
			t.Errorf("ImportNode(generation %d): artifact %+v kernel %+v command %q memory %d vCPUs %d; want %s, %s, the spec's command line, 256 MiB, 1",
				o.Generation, imp.Artifact, imp.Kernel, imp.Command, imp.MemoryMB, imp.CPUs, disk.Digest, kernel.Digest)
		}
		if len(imp.Attachments) != 1 || imp.Attachments[0].Name != "eth0" || imp.Attachments[0].MAC != att.MAC ||
			strings.Join(imp.Attachments[0].IPv4, ",") != "198.51.100.10/24" || imp.Attachments[0].Gateway != "198.51.100.1" {
			t.Errorf("ImportNode(generation %d): attachments %+v; want eth0 %s 198.51.100.10/24 via 198.51.100.1", o.Generation, imp.Attachments, att.MAC)
		}
	}
	checkImport(h1, o1)

	// reset makes the next generation from h, o, checks which path started it (started_from
	// begins with want), that the file the prior generation wrote is gone and that the same MAC
	// and address answer both ways, and deletes the prior generation.
	reset := func(h substrate.Handle, o substrate.Owner, want string) (substrate.Handle, substrate.Owner) {
		t.Helper()
		mark := fmt.Sprintf("/generation-%d-was-here", o.Generation)
		guestRun(t, d, h, "touch", mark)
		next := o
		next.Generation++
		hn, err := d.NewGeneration(ctx, h, o, spec(next))
		if err != nil {
			t.Fatal(err)
		}
		if obs, _ := d.ObserveNode(ctx, h, o); obs.Status != substrate.Present {
			t.Fatalf("prior generation after NewGeneration: %s (%s); it must run until the new one is up", obs.Status, obs.Reason)
		}
		bringUp(hn, next)
		if err := d.DeleteNode(ctx, h, o); err != nil {
			t.Fatalf("DeleteNode(prior generation %d): %v", o.Generation, err)
		}
		obs, err := d.ObserveNode(ctx, hn, next)
		if err != nil || obs.Status != substrate.Present {
			t.Fatalf("generation %d: %s (%s), %v", next.Generation, obs.Status, obs.Reason, err)
		}
		if got := obs.Attributes["started_from"]; !strings.HasPrefix(got, want) {
			t.Errorf("generation %d started_from %q, want %q...", next.Generation, got, want)
		}
		pingFromNetns(t, peer, "198.51.100.10")
		guestPing(t, d, hn, "198.51.100.20")
		if links := guestRun(t, d, hn, "ip", "-o", "link"); !strings.Contains(links, att.MAC) {
			t.Errorf("generation %d: no guest link with MAC %s:\n%s", next.Generation, att.MAC, links)
		}
		if res, err := d.Exec(ctx, hn, substrate.ExecRequest{Argv: []string{"test", "-e", mark}}); err != nil || res.ExitCode == 0 {
			t.Errorf("generation %d sees the prior generation's file %s (exit %d, %v): its state was not reset", next.Generation, mark, res.ExitCode, err)
		}
		if p1, p2 := d.overlayPath(o), d.overlayPath(next); p1 == p2 {
			t.Errorf("both generations use overlay %s", p1)
		} else if _, err := os.Stat(p1); !os.IsNotExist(err) {
			t.Errorf("prior generation's overlay %s after its deletion: %v, want gone", p1, err)
		}
		res, err := d.Residue(ctx, topo)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range res {
			if x.Owner.Generation != next.Generation && x.Kind != "snapshot" {
				t.Errorf("residue of the prior generation after its deletion: %s %s", x.Kind, x.ExternalID)
			}
		}
		return hn, next
	}
	// The fast path: the new generation is restored from the snapshot taken at the first start.
	h2, o2 := reset(h1, o1, "snapshot")
	checkImport(h2, o2) // its overlay sits on the snapshot disk, which sits on the baseline
	// A corrupted save image: the reset notices at the restore and boots cold.
	f, err := os.OpenFile(d.snapBase(o1)+".save", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	if _, err := f.WriteAt([]byte("corrupted"), fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	h3, o3 := reset(h2, o2, "cold: snapshot restore failed")
	// No snapshot at all: cold on the baseline, and that first start takes a new snapshot.
	if err := os.Remove(d.snapBase(o1) + ".json"); err != nil {
		t.Fatal(err)
	}
	h4, o4 := reset(h3, o3, "cold: no usable snapshot")
	if _, err := os.Stat(d.snapBase(o4) + ".json"); err != nil {
		t.Errorf("no new snapshot after a cold start on the baseline: %v", err)
	}
	if err := d.VerifyArtifact(ctx, disk); err != nil {
		t.Errorf("baseline after four generations: %v (it must never be written)", err)
	}
	if err := d.DeleteNode(ctx, h4, o4); err != nil {
		t.Fatal(err)
	}
	if left, err := d.Residue(ctx, topo); err != nil || len(left) != 0 {
		t.Errorf("residue after deleting the node: %+v, %v; want none", left, err)
	}
	if _, err := os.Stat(d.overlayDir(topo)); !os.IsNotExist(err) {
		t.Errorf("overlay directory %s after deleting the last node: %v, want gone", d.overlayDir(topo), err)
	}
}

// consoleTail is the end of a node's serial console, for failure messages.
func consoleTail(d *Driver, o substrate.Owner) string {
	b, err := os.ReadFile(d.consolePath(o))
	if err != nil {
		return ""
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return "\nconsole:\n" + string(b)
}
