package libvirt

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestSaveImageRewrite: the header and XML of a save image are rewritten in place and read back,
// the stream is untouched, and an XML that does not fit or a foreign file is refused.
func TestSaveImageRewrite(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.save")
	h := saveHeader{DataLen: 256, WasRunning: 1}
	b, err := encodeSaveHeader(h, "<domain><name>a</name></domain>", "<cookie/>")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append(b, "QEVM stream"...), 0o600); err != nil {
		t.Fatal(err)
	}
	sum1, n1, err := streamSHA256(p, h.streamOffset())
	if err != nil || n1 != int64(len("QEVM stream")) {
		t.Fatalf("stream: %d bytes, %v", n1, err)
	}
	if err := rewriteSaveImage(p, h, "<domain><name>a-much-longer-name</name></domain>", "<cookie/>"); err != nil {
		t.Fatal(err)
	}
	gh, doc, cookie, err := readSaveImage(p)
	if err != nil || gh != h || doc != "<domain><name>a-much-longer-name</name></domain>" || cookie != "<cookie/>" {
		t.Fatalf("read back: %+v %q %q %v", gh, doc, cookie, err)
	}
	if sum2, _, _ := streamSHA256(p, h.streamOffset()); sum2 != sum1 {
		t.Errorf("stream changed by the header rewrite: %s, want %s", sum2, sum1)
	}
	if err := rewriteSaveImage(p, h, strings.Repeat("x", 300), ""); !errors.Is(err, errSaveImage) {
		t.Errorf("XML larger than the room: %v, want errSaveImage", err)
	}
	if err := os.WriteFile(p, append([]byte("LibvirtQemudPart"), make([]byte, 200)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := readSaveImage(p); !errors.Is(err, errSaveImage) {
		t.Errorf("partial image: %v, want errSaveImage", err)
	}
}

// TestRetarget: the saved XML gets the new domain's name, UUID, metadata, overlay, console and
// taps (by MAC); a NIC without a counterpart is refused.
func TestRetarget(t *testing.T) {
	nic := func(tap, mac string) libvirtxml.DomainInterface { return nicDevice(tap, mac) }
	mk := func(name, uuid, overlay, console string, nics ...libvirtxml.DomainInterface) *libvirtxml.Domain {
		doc, err := buildDomain(domainSpec{Type: TypeQEMU, Name: name, UUID: uuid, Meta: ownerMeta{Topology: name},
			Overlay: overlay, Console: console})
		if err != nil {
			t.Fatal(err)
		}
		x, err := parseDomain(doc)
		if err != nil {
			t.Fatal(err)
		}
		x.Devices.Interfaces = nics
		return x
	}
	saved := mk("old", "11111111-1111-4111-8111-111111111111", "/o/old.qcow2", "/o/old.log", nic("svtold", "02:00:00:00:00:01"))
	savedDoc, err := saved.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	next := mk("new", "22222222-2222-4222-8222-222222222222", "/o/new.qcow2", "/o/new.log", nic("svtnew", "02:00:00:00:00:01"))
	doc, err := retarget(savedDoc, next)
	if err != nil {
		t.Fatal(err)
	}
	got, err := parseDomain(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "new" || got.UUID != next.UUID || got.Devices.Disks[0].Source.File.File != "/o/new.qcow2" ||
		got.Devices.Serials[0].Source.File.Path != "/o/new.log" || got.Devices.Interfaces[0].Target.Dev != "svtnew" {
		t.Errorf("retargeted XML:\n%s", doc)
	}
	if m, ok := findMeta(got); !ok || m.Topology != "new" {
		t.Errorf("retargeted metadata: %+v, %v; want the new domain's", m, ok)
	}
	other := mk("new", next.UUID, "/o/new.qcow2", "/o/new.log", nic("svtnew", "02:00:00:00:00:02"))
	if _, err := retarget(savedDoc, other); err == nil {
		t.Error("retarget onto a domain whose NIC has another MAC: accepted")
	}
}

// snapshotDriver is a fake-connection driver that waits for a scripted agent (so first starts
// take snapshots), a stored baseline, and the node spec of an owner and memory size on it.
func snapshotDriver(t *testing.T) (*Driver, *fakeConn, substrate.ArtifactIdentity, func(substrate.Owner, int) substrate.NodeSpec) {
	t.Helper()
	d, fc := fakeDriver(t)
	d.readyTimeout = 10 * time.Second
	var seen []string
	fc.agent = scriptedAgent(t, &seen)
	base := storedDisk(t, d)
	return d, fc, base, func(o substrate.Owner, mem int) substrate.NodeSpec {
		return substrate.NodeSpec{Owner: o, Driver: Name, Artifact: &base, MemoryMB: mem}
	}
}

// TestSnapshotFlowOnFakeConnection: the first start takes the node's snapshot (save, disk copy,
// restore), a reset defines the next generation on the snapshot disk and restores the image
// retargeted to it, a changed spec or a corrupted disk makes the reset cold and says why, and
// the snapshot goes with the node's last domain.
func TestSnapshotFlowOnFakeConnection(t *testing.T) {
	ctx := context.Background()
	d, fc, _, spec := snapshotDriver(t)
	o1 := testOwner("vm")
	h1, err := d.CreateNode(ctx, spec(o1, 256))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h1, spec(o1, 256)); err != nil {
		t.Fatal(err)
	}
	sb := d.snapBase(o1)
	if _, err := os.Stat(sb + ".json"); err != nil {
		t.Fatalf("no snapshot after the first start: %v", err)
	}
	if len(fc.restores) != 1 {
		t.Fatalf("%d restores while taking the snapshot, want 1", len(fc.restores))
	}
	obs, _ := d.ObserveNode(ctx, h1, o1)
	if obs.Status != substrate.Present || obs.Attributes["started_from"] != "cold" {
		t.Fatalf("generation 1: %s, started_from %q; want present, cold", obs.Status, obs.Attributes["started_from"])
	}
	// The fast path.
	o2 := o1
	o2.Generation = 2
	h2, err := d.NewGeneration(ctx, h1, o1, spec(o2, 256))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h2, spec(o2, 256)); err != nil {
		t.Fatal(err)
	}
	if obs, _ := d.ObserveNode(ctx, h2, o2); obs.Attributes["started_from"] != "snapshot" {
		t.Fatalf("generation 2 started_from %q, want snapshot", obs.Attributes["started_from"])
	}
	x, err := parseDomain(fc.restores[len(fc.restores)-1])
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := findMeta(x); x.UUID != h2.ExternalID || m.Generation != "2" || x.Devices.Disks[0].Source.File.File != d.overlayPath(o2) {
		t.Errorf("restored XML is not generation 2's (uuid %s, generation %s, disk %s)", x.UUID, m.Generation, x.Devices.Disks[0].Source.File.File)
	}
	if err := d.DeleteNode(ctx, h1, o1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(sb + ".json"); err != nil {
		t.Fatalf("snapshot gone with the prior generation: %v; it belongs to the node", err)
	}
	// Another memory size: the snapshot does not fit, the reset is cold and says why.
	o3 := o2
	o3.Generation = 3
	h3, err := d.NewGeneration(ctx, h2, o2, spec(o3, 512))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h3, spec(o3, 512)); err != nil {
		t.Fatal(err)
	}
	if obs, _ := d.ObserveNode(ctx, h3, o3); !strings.HasPrefix(obs.Attributes["started_from"], "cold: no usable snapshot: ") {
		t.Fatalf("generation 3 (other memory) started_from %q, want cold: no usable snapshot", obs.Attributes["started_from"])
	}
	if err := d.DeleteNode(ctx, h2, o2); err != nil {
		t.Fatal(err)
	}
	// Generation 3 started cold on the baseline and took a new snapshot; corrupt its disk.
	if err := os.WriteFile(d.snapBase(o3)+".qcow2", []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	o4 := o3
	o4.Generation = 4
	h4, err := d.NewGeneration(ctx, h3, o3, spec(o4, 512))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h4, spec(o4, 512)); err != nil {
		t.Fatal(err)
	}
	if obs, _ := d.ObserveNode(ctx, h4, o4); !strings.Contains(obs.Attributes["started_from"], "snapshot disk") {
		t.Fatalf("generation 4 (corrupted snapshot disk) started_from %q, want cold naming the snapshot disk", obs.Attributes["started_from"])
	}
	if err := d.DeleteNode(ctx, h3, o3); err != nil {
		t.Fatal(err)
	}
	res, err := d.Residue(ctx, o1.Topology)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range res {
		kinds[r.Kind]++
	}
	if kinds["snapshot"] != 1 || kinds["domain"] != 1 || kinds["overlay"] != 1 {
		t.Errorf("residue with one generation running: %v, want one domain, overlay and snapshot", kinds)
	}
	if err := d.DeleteNode(ctx, h4, o4); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Residue(ctx, o1.Topology); err != nil || len(res) != 0 {
		t.Errorf("residue after deleting the node: %+v, %v; want none", res, err)
	}
	if _, err := os.Stat(d.overlayDir(o1.Topology)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("overlay directory after deleting the node: %v, want gone", err)
	}
}

// TestKeptGenerationKeepsItsBackingChain: a generation restored from the node's snapshot and
// kept (its reset failed) keeps the snapshot disk it was defined on when a later generation
// boots cold on the baseline and takes a new snapshot, so a cold start of the kept generation
// later still runs on the disk its overlay was made on; pruning keeps what a remaining domain
// sits on, and the node's last domain takes every snapshot.
func TestKeptGenerationKeepsItsBackingChain(t *testing.T) {
	ctx := context.Background()
	d, _, base, spec := snapshotDriver(t)
	o1 := testOwner("vm")
	o2, o3 := o1, o1
	o2.Generation, o3.Generation = 2, 3
	h1, err := d.CreateNode(ctx, spec(o1, 256))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h1, spec(o1, 256)); err != nil {
		t.Fatal(err)
	}
	h2, err := d.NewGeneration(ctx, h1, o1, spec(o2, 256))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h2, spec(o2, 256)); err != nil {
		t.Fatal(err)
	}
	if err := d.DeleteNode(ctx, h1, o1); err != nil {
		t.Fatal(err)
	}
	// The file generation 2's overlay was created on, and its content then.
	var backing string
	for _, c := range d.run.(*argv.Fake).Calls {
		if c.Argv[len(c.Argv)-1] == d.overlayPath(o2) {
			backing = c.Argv[slices.Index(c.Argv, "-b")+1]
		}
	}
	if backing == "" || backing == filepath.Join(base.Ref, fileDisk) {
		t.Fatalf("generation 2's overlay backing file %q: want a snapshot disk", backing)
	}
	want, _, err := substrate.FileSHA256(backing)
	if err != nil {
		t.Fatal(err)
	}
	// A reset under another memory size boots cold on the baseline; the new generation's first
	// start (its guest wrote its overlay meanwhile) takes a snapshot. The reset then fails:
	// generation 2 is kept.
	h3, err := d.NewGeneration(ctx, h2, o2, spec(o3, 512))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.overlayPath(o3), []byte("QFI\xfb overlay written by generation 3"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h3, spec(o3, 512)); err != nil {
		t.Fatal(err)
	}
	if obs, _ := d.ObserveNode(ctx, h3, o3); !strings.HasPrefix(obs.Attributes["started_from"], "cold: no usable snapshot") {
		t.Fatalf("generation 3 started_from %q, want cold: no usable snapshot", obs.Attributes["started_from"])
	}
	if gens, _ := d.snapshotGens(o3); len(gens) != 2 {
		t.Fatalf("snapshots after generation 3's first start: generations %v, want two (1 and 3)", gens)
	}
	if err := d.DeleteNode(ctx, h3, o3); err != nil {
		t.Fatal(err)
	}
	if got, _, err := substrate.FileSHA256(backing); err != nil || got != want {
		t.Fatalf("generation 2's backing file %s: sha256 %s, %v; want %s, unchanged (a later cold start would run on another disk)", backing, got, err, want)
	}
	// Generation 2, kept, is stopped and started cold again: on the same chain.
	if err := d.StopNode(ctx, h2, o2); err != nil {
		t.Fatal(err)
	}
	if err := d.StartNode(ctx, h2, spec(o2, 256)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := substrate.FileSHA256(backing); err != nil || got != want {
		t.Fatalf("generation 2's backing file after its restart: sha256 %s, %v; want %s", got, err, want)
	}
	// Generation 3's snapshot (the newest) stays for the next reset beside generation 1's (which
	// generation 2 sits on); with the node's last domain both go.
	if gens, _ := d.snapshotGens(o2); len(gens) != 2 {
		t.Errorf("snapshots while generation 2 runs: generations %v, want 1 and 3", gens)
	}
	if err := d.DeleteNode(ctx, h2, o2); err != nil {
		t.Fatal(err)
	}
	if res, err := d.Residue(ctx, o1.Topology); err != nil || len(res) != 0 {
		t.Errorf("residue after deleting the node: %+v, %v; want none", res, err)
	}
}
