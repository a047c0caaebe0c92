package libvirt

import (
	"context"
	"encoding/xml"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"libvirt.org/go/libvirtxml"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestDaemonImport (daemon tier): a domain sysbox defined and wired is imported by name and by
// UUID, normalized (baseline digest and store directory, memory, vCPUs, the attachment with its
// name, MAC, tap and bridge); domains carrying another owner's metadata, none, or shapes sysbox
// cannot manage are refused with the typed error, and nothing is changed on them. No guest
// boots: the domains stay defined and shut off.
func TestDaemonImport(t *testing.T) {
	d := daemonDriver(t, time.Minute)
	ctx := context.Background()
	topo := "imptest-" + randHex(6)
	cleanupTopology(t, d, topo)
	art := resolved(t, d, blankDisk(t))
	br := testBridge(t, topo, "")
	owner := substrate.Owner{Topology: topo, Address: "sysbox_node.legacy", Type: "sysbox_node", Generation: 1}
	h, err := d.CreateNode(ctx, substrate.NodeSpec{Owner: owner, Driver: Name, Artifact: &art, MemoryMB: 96, CPUs: 2})
	if err != nil {
		t.Fatal(err)
	}
	const mac = "02:00:c6:33:64:2a"
	if _, err := d.Attach(ctx, h, substrate.AttachmentSpec{Node: owner.Address, Name: "lan.0", Network: br, MAC: mac, Owner: owner}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{domainName(owner), h.ExternalID} {
		got, err := d.ImportNode(ctx, id, owner)
		if err != nil {
			t.Fatalf("ImportNode(%s): %v", id, err)
		}
		if got.Handle.ExternalID != h.ExternalID || d.CheckPrivate(got.Handle.Private) != nil {
			t.Fatalf("ImportNode(%s): handle %+v, want domain %s", id, got.Handle, h.ExternalID)
		}
		if p, _ := decodeNodePrivate(got.Handle.Private); p.Marker != owner.Marker() || p.Overlay != d.overlayPath(owner) {
			t.Errorf("ImportNode(%s): private %+v, want marker of %s and overlay %s", id, p, owner.Address, d.overlayPath(owner))
		}
		if got.Artifact == nil || got.Artifact.Digest != art.Digest || got.Artifact.Ref != art.Ref || got.Artifact.Kind != KindQCOW2 {
			t.Errorf("ImportNode(%s): artifact %+v, want %s in %s", id, got.Artifact, art.Digest, art.Ref)
		}
		if got.MemoryMB != 96 || got.CPUs != 2 || got.Kernel != nil || len(got.Command) != 0 {
			t.Errorf("ImportNode(%s): memory %d MiB, %d vCPUs, kernel %+v, command %q; want 96, 2, none", id, got.MemoryMB, got.CPUs, got.Kernel, got.Command)
		}
		if len(got.Attachments) != 1 || got.Attachments[0].Name != "lan.0" || got.Attachments[0].MAC != mac {
			t.Fatalf("ImportNode(%s): attachments %+v, want lan.0 with %s", id, got.Attachments, mac)
		}
		np, err := decodeNICPrivate(got.Attachments[0].Private)
		if err != nil || np.Tap != tapName(owner, "lan.0") || np.Bridge != br.ExternalID {
			t.Errorf("ImportNode(%s): attachment private %+v (%v), want tap %s on %s", id, np, err, tapName(owner, "lan.0"), br.ExternalID)
		}
		if obs, err := d.ObserveAttachment(ctx, got.Handle, got.Attachments[0], owner); err != nil || obs.Status != substrate.Present {
			t.Errorf("observe imported attachment: %s (%s), %v; want present", obs.Status, obs.Reason, err)
		}
	}
	if obs, err := d.ObserveNode(ctx, h, owner); err != nil || obs.Status != substrate.Degraded {
		t.Errorf("observe the imported (shut off) node: %s (%s), %v; want degraded", obs.Status, obs.Reason, err)
	}

	// Hand-made domains, each on an overlay of the stored baseline unless the case says otherwise.
	c, err := d.conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := stateDir(t)
	overlay := func(backing string) string {
		p := filepath.Join(dir, "o-"+randHex(4)+".qcow2")
		args := []string{"create", "-q", "-f", "qcow2", p, "16M"}
		if backing != "" {
			args = []string{"create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", backing, p}
		}
		if out, err := exec.Command("qemu-img", args...).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img %v: %v: %s", args, err, out)
		}
		return p
	}
	base := filepath.Join(art.Ref, fileDisk)
	define := func(o substrate.Owner, edit func(*libvirtxml.Domain)) string {
		t.Helper()
		name := "sysbox-imptest-" + randHex(4)
		doc, err := buildDomain(domainSpec{Type: d.domainType, Name: name, UUID: newUUID(), Meta: newOwnerMeta(o),
			MemoryMB: 64, Overlay: overlay(base), Console: filepath.Join(dir, name+".log")})
		if err != nil {
			t.Fatal(err)
		}
		x, err := parseDomain(doc)
		if err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(x)
		}
		if doc, err = x.Marshal(); err != nil {
			t.Fatal(err)
		}
		dom, err := c.DomainDefineXML(doc)
		if err != nil {
			t.Fatalf("define %s: %v", name, err)
		}
		t.Cleanup(func() { _ = c.DomainUndefineFlags(dom, undefineFlags) })
		return name
	}
	other := owner
	other.Address = "sysbox_node.someone_else"
	otherTopo := owner
	otherTopo.Topology = topo + "-other"
	gen4 := owner
	gen4.Generation = 4
	for _, tt := range []struct {
		name string
		id   string
		want error
	}{
		{"metadata of another address", define(other, nil), driver.ErrNotOwned},
		{"metadata of another topology", define(otherTopo, nil), driver.ErrNotOwned},
		{"metadata of another generation", define(gen4, nil), driver.ErrNotOwned},
		{"no metadata", define(owner, func(x *libvirtxml.Domain) { x.Metadata = nil }), driver.ErrNotOwned},
		{"anchors without the marker", define(owner, func(x *libvirtxml.Domain) {
			m := newOwnerMeta(owner)
			m.Marker = ""
			b, _ := xml.Marshal(m)
			x.Metadata.XML = string(b)
		}), driver.ErrNotOwned},
		{"disk without a backing file", define(owner, func(x *libvirtxml.Domain) {
			x.Devices.Disks[0].Source.File.File = overlay("")
		}), driver.ErrInvalid},
		{"raw disk", define(owner, func(x *libvirtxml.Domain) {
			x.Devices.Disks[0].Driver.Type = "raw"
		}), driver.ErrInvalid},
		{"two disks", define(owner, func(x *libvirtxml.Domain) {
			disk := x.Devices.Disks[0]
			disk.Target = &libvirtxml.DomainDiskTarget{Dev: "vdb", Bus: "virtio"}
			x.Devices.Disks = append(x.Devices.Disks, disk)
		}), driver.ErrInvalid},
		{"no guest agent channel", define(owner, func(x *libvirtxml.Domain) { x.Devices.Channels = nil }), driver.ErrInvalid},
		{"interface on a libvirt-managed bridge port", define(owner, func(x *libvirtxml.Domain) {
			x.Devices.Interfaces = []libvirtxml.DomainInterface{{
				Source: &libvirtxml.DomainInterfaceSource{Bridge: &libvirtxml.DomainInterfaceSourceBridge{Bridge: br.ExternalID}},
				MAC:    &libvirtxml.DomainInterfaceMAC{Address: "02:00:c6:33:64:2b"}, Alias: attachmentAlias("lan")}}
		}), driver.ErrInvalid},
		{"no such domain (name)", "sysbox-imptest-none-" + randHex(4), driver.ErrNotFound},
		{"no such domain (UUID)", newUUID(), driver.ErrNotFound},
	} {
		_, err := d.ImportNode(ctx, tt.id, owner)
		if !errors.Is(err, tt.want) {
			t.Errorf("ImportNode(%s): got %v, want %v", tt.name, err, tt.want)
		}
	}
}

// TestAttachmentAlias: an attachment name goes into a libvirt user alias (plain when libvirt's
// alias characters allow it, hex otherwise) and comes back unchanged; other aliases name none.
func TestAttachmentAlias(t *testing.T) {
	for _, tt := range []struct{ name, alias string }{
		{"lan", "ua-sysbox-a-lan"},
		{"wan_2-b", "ua-sysbox-a-wan_2-b"},
		{"lan.0", "ua-sysbox-h-6c616e2e30"},
		{"ä", "ua-sysbox-h-c3a4"},
	} {
		a := attachmentAlias(tt.name)
		if a.Name != tt.alias {
			t.Errorf("attachmentAlias(%q) = %q, want %q", tt.name, a.Name, tt.alias)
		}
		if got, ok := attachmentOf(libvirtxml.DomainInterface{Alias: a}); !ok || got != tt.name {
			t.Errorf("attachmentOf(%q) = %q, %v; want %q", a.Name, got, ok, tt.name)
		}
	}
	for _, alias := range []string{"net0", "ua-other", "ua-sysbox-a-", "ua-sysbox-h-zz", "ua-sysbox-h-"} {
		if got, ok := attachmentOf(libvirtxml.DomainInterface{Alias: &libvirtxml.DomainAlias{Name: alias}}); ok {
			t.Errorf("attachmentOf(%q) = %q, want no attachment", alias, got)
		}
	}
	if _, ok := attachmentOf(libvirtxml.DomainInterface{}); ok {
		t.Error("attachmentOf(no alias): want no attachment")
	}
}
