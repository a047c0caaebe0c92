package libvirt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
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
