package netns

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// ipNetnsDel deletes the node's namespace name out of band, as an operator would.
func ipNetnsDel(t *testing.T, n *testNode) {
	t.Helper()
	ip := testenv.RequireBinary(t, "ip")
	if out, err := exec.Command(ip, "netns", "del", n.h.ExternalID).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v\n%s", n.h.ExternalID, err, out)
	}
}

// nodeFiles lists which of name's files exist in StateDir.
func nodeFiles(d *Driver, name string) []string {
	var out []string
	for _, p := range []string{d.sidecarPath(name), d.hostsPath(name), d.logPath(name)} {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// TestKernelOutOfBandDeleteLeavesNoResidue (kernel tier): a node's namespace is deleted behind
// the driver's back (`ip netns del`) while its main process still runs, so the namespace lives
// on unnamed with its veth. Observed absent, the node is either re-created as the next
// generation and then destroyed, or destroyed at once. Either way every file of the first
// generation (sidecar, hosts, log), its main process and its host veth end go, and the audit
// is clean. Before the fix the first case left the first generation's files (netns-sidecar
// and netns-hosts residue) and both left the process and its veth.
func TestKernelOutOfBandDeleteLeavesNoResidue(t *testing.T) {
	for _, recreate := range []bool{true, false} {
		name := "destroy at once"
		if recreate {
			name = "recreated, then destroyed"
		}
		t.Run(name, func(t *testing.T) {
			l := newLab(t)
			ctx := context.Background()
			nh, no := l.network("sysbox_network.lan", "198.18.9.0/24")
			lan := substrate.AttachmentSpec{Name: "lan", Network: nh, IPv4: []string{"198.18.9.10/24"}}
			n := l.node("sysbox_node.a", []string{"sleep", "infinity"}, lan)
			if err := l.d.SetHosts(ctx, n.h, n.owner, []driver.HostEntry{{Address: "198.18.9.10", Names: []string{"a"}}}); err != nil {
				t.Fatal(err)
			}
			sc, err := l.d.readSidecar(n.h.ExternalID)
			if err != nil || sc.Pid <= 0 {
				t.Fatalf("sidecar: %+v, %v", sc, err)
			}
			p, err := decode(n.atts[0].Private, kindAttachment)
			if err != nil {
				t.Fatal(err)
			}
			gen1 := n.h.ExternalID
			if got := nodeFiles(l.d, gen1); len(got) != 3 {
				t.Fatalf("files of %s before: %v, want sidecar, hosts and log", gen1, got)
			}

			ipNetnsDel(t, n)
			if obs, err := l.d.ObserveNode(ctx, n.h, n.owner); err != nil || obs.Status != substrate.Absent {
				t.Fatalf("ObserveNode after ip netns del: %s (%s), %v; want absent", obs.Status, obs.Reason, err)
			}
			nodes := []*testNode{n}
			if recreate {
				// What apply does for a node observed absent: its next generation, while state
				// forgets the first (no delete of it).
				o2 := n.owner
				o2.Generation++
				spec := substrate.NodeSpec{Owner: o2, Driver: Name, Command: []string{"sleep", "infinity"}}
				h2, err := l.d.CreateNode(ctx, spec)
				if err != nil {
					t.Fatal(err)
				}
				n2 := &testNode{h: h2, owner: o2, spec: spec}
				lan.IPv4 = []string{"198.18.9.11/24"}
				l.wire(n2, []substrate.AttachmentSpec{lan})
				nodes = []*testNode{n2}
			}
			l.destroy(nodes, testNet{nh, no})

			if got := nodeFiles(l.d, gen1); len(got) != 0 {
				t.Errorf("files of the namespace deleted out of band left after destroy: %v", got)
			}
			if alive(sc.Pid) {
				t.Errorf("main process %d of the namespace deleted out of band still runs", sc.Pid)
			}
			// A deleted veth vanishes asynchronously (HOST-NOTES): give it a moment.
			deadline := time.Now().Add(3 * time.Second)
			for {
				_, err := netlink.LinkByName(p.Veth.HostName)
				if err != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Errorf("host veth end %s of the namespace deleted out of band still exists", p.Veth.HostName)
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if objs := l.residue(); len(objs) != 0 {
				t.Errorf("residue after destroy: %+v", objs)
			}
		})
	}
}

// TestKernelGoneNamespaceHostEndsDeleted (kernel tier): a node's main process is killed and its
// namespace name deleted out of band, but the namespace lives on (here: a descriptor holds it;
// in CI: the kernel's asynchronous teardown had not run yet). DeleteNode removes the host veth
// end carrying the node's marker at once, so destroy's audit right after it is clean. Before
// the fix the end stayed until the kernel freed the namespace, and the audit reported it.
func TestKernelGoneNamespaceHostEndsDeleted(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	nh, no := l.network("sysbox_network.lan", "198.18.10.0/24")
	n := l.node("sysbox_node.a", []string{"sleep", "infinity"}, substrate.AttachmentSpec{Name: "lan", Network: nh, IPv4: []string{"198.18.10.10/24"}})
	p, err := decode(n.atts[0].Private, kindAttachment)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := l.d.readSidecar(n.h.ExternalID)
	if err != nil || sc.Pid <= 0 {
		t.Fatalf("sidecar: %+v, %v", sc, err)
	}
	hold, err := os.Open(l.d.nsPath(n.h.ExternalID))
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if err := unix.Kill(sc.Pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); alive(sc.Pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("main process %d still alive after SIGKILL", sc.Pid)
		}
	}
	ipNetnsDel(t, n)
	if err := l.d.DeleteNode(ctx, n.h, n.owner); err != nil {
		t.Fatalf("DeleteNode of the node whose namespace is gone: %v", err)
	}
	if _, err := netlink.LinkByName(p.Veth.HostName); err == nil {
		t.Errorf("host veth end %s of the gone namespace still exists right after DeleteNode", p.Veth.HostName)
	}
	if err := l.d.DeleteNetwork(ctx, nh, no); err != nil {
		t.Fatal(err)
	}
	if objs := l.residue(); len(objs) != 0 {
		t.Errorf("residue after destroy: %+v", objs)
	}
}

// TestKernelStaleTempFilesRemovedAndAudited (kernel tier): temporary files of sidecar writes a
// killed process left (.NAME.json.tmp-DIGITS, written before this process started) are removed
// by the next sidecar write (CreateNode here) or DeleteNode of their node by a Driver that
// lists them (the CLI builds one per command), and reported by the audit until then; one
// written since this process started, and another node's, are left alone. Before the fix none
// was removed or reported.
func TestKernelStaleTempFilesRemovedAndAudited(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	o := l.owner("sysbox_node", "sysbox_node.a")
	name := NetnsName(o)
	old := processStart.Add(-time.Minute)
	temp := func(n, suffix string, content []byte, mtime time.Time) string {
		t.Helper()
		p := filepath.Join(l.d.StateDir, "."+n+".json.tmp-"+suffix)
		if err := os.MkdirAll(l.d.StateDir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
		return p
	}
	record := func(o substrate.Owner) []byte {
		b, err := durable.EncodeRecord(sidecarKind, 1, sidecar{Marker: o.Marker(), Netns: NetnsName(o)})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	exists := func(p string) bool { _, err := os.Lstat(p); return err == nil }

	// A killed first write (the intent) of the node about to be created: CreateNode removes it.
	beforeCreate := temp(name, "101", record(o), old)
	n := l.node("sysbox_node.a", nil)
	if exists(beforeCreate) {
		t.Errorf("CreateNode left %s", beforeCreate)
	}

	torn := temp(name, "202", []byte(`{"kind":"sysbox.netns.no`), old) // its sidecar names the owner
	complete := temp(NetnsName(substrate.Owner{Topology: o.Topology, Address: "sysbox_node.gone", Type: o.Type, Generation: 3}), "303",
		record(substrate.Owner{Topology: o.Topology, Address: "sysbox_node.gone", Type: o.Type, Generation: 3}), old)
	fresh := temp(name, "404", record(o), time.Now())
	other := l.owner("sysbox_node", "sysbox_node.other")
	other.Topology += "-other"
	foreign := temp(NetnsName(other), "505", record(other), old)

	var got []string
	for _, obj := range l.residue() {
		if obj.Kind == "netns-tempfile" {
			got = append(got, obj.ExternalID)
		}
	}
	slices.Sort(got)
	want := []string{torn, complete, fresh}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("audit: temporary files %v, want %v", got, want)
	}

	next := &Driver{NetnsDir: l.d.NetnsDir, StateDir: l.d.StateDir} // the next command's
	if err := next.DeleteNode(ctx, n.h, n.owner); err != nil {
		t.Fatal(err)
	}
	for p, keep := range map[string]bool{torn: false, fresh: true, foreign: true, complete: true} {
		if exists(p) != keep {
			t.Errorf("after DeleteNode of %s: %s exists: %v, want %v", n.owner.Address, p, exists(p), keep)
		}
	}
	os.Remove(fresh)
	os.Remove(complete)
	if objs := l.residue(); len(objs) != 0 {
		t.Errorf("residue: %+v", objs)
	}
}

// TestDeleteGoneNamespaceChecksSidecar: when the namespace is already gone, DeleteNode removes
// the node's files only if its sidecar records the same owner; another owner's is ErrNotOwned
// and left, an unreadable one an error. Before the fix both were removed unchecked.
func TestDeleteGoneNamespaceChecksSidecar(t *testing.T) {
	d := &Driver{NetnsDir: t.TempDir(), StateDir: t.TempDir()}
	ctx := context.Background()
	owner := substrate.Owner{Topology: "t1", Address: "sysbox_node.a", Type: "sysbox_node", Generation: 1}
	name := NetnsName(owner)
	h := substrate.Handle{Driver: Name, ExternalID: name, Private: encode(private{Kind: kindNode, Netns: name})}

	other := owner
	other.Topology = "t2"
	if err := d.writeSidecar(sidecar{Marker: other.Marker(), Netns: name}); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, h, owner); !errors.Is(err, driver.ErrNotOwned) {
		t.Errorf("DeleteNode over another owner's sidecar: got %v, want ErrNotOwned", err)
	}
	if _, err := d.readSidecar(name); err != nil {
		t.Errorf("the refused delete removed the sidecar: %v", err)
	}

	if err := os.WriteFile(d.sidecarPath(name), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, h, owner); err == nil || !strings.Contains(err.Error(), d.sidecarPath(name)) {
		t.Errorf("DeleteNode over an unreadable sidecar: got %v, want an error naming %s", err, d.sidecarPath(name))
	}
	if _, err := os.Lstat(d.sidecarPath(name)); err != nil {
		t.Errorf("the refused delete removed the unreadable sidecar: %v", err)
	}

	if err := d.writeSidecar(sidecar{Marker: owner.Marker(), Netns: name}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.logPath(name), []byte("log\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, h, owner); err != nil {
		t.Fatal(err)
	}
	if got := nodeFiles(d, name); len(got) != 0 {
		t.Errorf("files left: %v", got)
	}
}

// TestDeleteRemovesPreviousGenerationFiles: deleting generation 2 of a node also removes the
// files generation 1 left when its namespace is gone and its sidecar records that generation of
// the same resource; a generation-1 sidecar of another owner under that name is left (to the
// audit). Before the fix generation 1's files stayed.
func TestDeleteRemovesPreviousGenerationFiles(t *testing.T) {
	d := &Driver{NetnsDir: t.TempDir(), StateDir: t.TempDir()}
	ctx := context.Background()
	o1 := substrate.Owner{Topology: "t1", Address: "sysbox_node.a", Type: "sysbox_node", Generation: 1}
	o2 := o1
	o2.Generation = 2
	gen1, gen2 := NetnsName(o1), NetnsName(o2)
	h2 := substrate.Handle{Driver: Name, ExternalID: gen2, Private: encode(private{Kind: kindNode, Netns: gen2})}
	write := func(sidecarOwner substrate.Owner) {
		t.Helper()
		if err := d.writeSidecar(sidecar{Marker: sidecarOwner.Marker(), Netns: gen1}); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(d.logPath(gen1), []byte("log\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	foreign := o1
	foreign.Address = "sysbox_node.b"
	write(foreign)
	if err := d.DeleteNode(ctx, h2, o2); err != nil {
		t.Fatal(err)
	}
	if got := nodeFiles(d, gen1); len(got) != 2 {
		t.Errorf("generation 1 files under another owner's sidecar: %v left, want both kept", got)
	}

	write(o1)
	if err := d.DeleteNode(ctx, h2, o2); err != nil {
		t.Fatal(err)
	}
	if got := nodeFiles(d, gen1); len(got) != 0 {
		t.Errorf("generation 1 files left after DeleteNode of generation 2: %v", got)
	}
}
