package libvirt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"zyvor.dev/sysbox/drivers/linuxnet"
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

func pingFromNetns(t *testing.T, ns, to string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "busybox", "ping", "-c", "1", "-W", "5", to).CombinedOutput()
	if err != nil {
		t.Fatalf("ping %s from netns %s: %v: %s", to, ns, err, out)
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
	att := substrate.AttachmentSpec{Node: o1.Address, Name: "eth0", Network: br, IPv4: []string{"198.51.100.10/24"}, MAC: "02:00:c6:33:64:0a"}
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
	bringUp(h1, o1)
	if got := strings.TrimSpace(guestRun(t, d, h1, "hostname")); got != "sysbox-guest" {
		t.Errorf("hostname in the guest: %q, want sysbox-guest", got)
	}
	res, err := d.Exec(ctx, h1, substrate.ExecRequest{Argv: []string{"sh", "-c", "cat; echo err >&2; exit 4"}, Stdin: []byte("from stdin\n")})
	if err != nil || res.ExitCode != 4 || string(res.Stdout) != "from stdin\n" || string(res.Stderr) != "err\n" {
		t.Errorf("exec with stdin: %+v (stdout %q stderr %q), %v; want exit 4, stdin echoed, err on stderr", res, res.Stdout, res.Stderr, err)
	}
	guestRun(t, d, h1, "ping", "-c", "1", "-W", "5", "198.51.100.20")
	pingFromNetns(t, peer, "198.51.100.10")
	obs, err := d.ObserveNode(ctx, h1, o1)
	if err != nil || obs.Status != substrate.Present || obs.Attributes["domain_type"] != TypeQEMU {
		t.Fatalf("ObserveNode: %s (%s) %v, %v; want present, domain type qemu", obs.Status, obs.Reason, obs.Attributes, err)
	}
	guestRun(t, d, h1, "touch", "/generation-1-was-here")

	// Reset: the next generation takes the same MAC and address.
	o2 := o1
	o2.Generation = 2
	h2, err := d.NewGeneration(ctx, h1, o1, spec(o2))
	if err != nil {
		t.Fatal(err)
	}
	if obs, _ := d.ObserveNode(ctx, h1, o1); obs.Status != substrate.Present {
		t.Fatalf("prior generation after NewGeneration: %s (%s); it must run until the new one is up", obs.Status, obs.Reason)
	}
	bringUp(h2, o2)
	if err := d.DeleteNode(ctx, h1, o1); err != nil {
		t.Fatalf("DeleteNode(prior generation): %v", err)
	}
	pingFromNetns(t, peer, "198.51.100.10")
	guestRun(t, d, h2, "ping", "-c", "1", "-W", "5", "198.51.100.20")
	if res, err := d.Exec(ctx, h2, substrate.ExecRequest{Argv: []string{"test", "-e", "/generation-1-was-here"}}); err != nil || res.ExitCode == 0 {
		t.Errorf("the new generation sees the prior generation's file (exit %d, %v): its state was not reset", res.ExitCode, err)
	}
	if p1, p2 := d.overlayPath(o1), d.overlayPath(o2); p1 == p2 {
		t.Errorf("both generations use overlay %s", p1)
	} else if _, err := os.Stat(p1); !os.IsNotExist(err) {
		t.Errorf("prior generation's overlay %s after its deletion: %v, want gone", p1, err)
	}
	if err := d.VerifyArtifact(ctx, disk); err != nil {
		t.Errorf("baseline after two generations: %v (it must never be written)", err)
	}
	res2, err := d.Residue(ctx, topo)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range res2 {
		if x.Owner.Generation != 2 {
			t.Errorf("residue of the prior generation after its deletion: %s %s", x.Kind, x.ExternalID)
		}
	}
	if err := d.DeleteNode(ctx, h2, o2); err != nil {
		t.Fatal(err)
	}
	if left, err := d.Residue(ctx, topo); err != nil || len(left) != 0 {
		t.Errorf("residue after deleting the node: %+v, %v; want none", left, err)
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
