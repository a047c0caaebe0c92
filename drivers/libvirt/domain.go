package libvirt

import (
	"encoding/hex"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"libvirt.org/go/libvirtxml"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

// metadataNS is the namespace of the sysbox element in a domain's <metadata>.
const metadataNS = "https://zyvor.dev/sysbox/libvirt/1"

// ownerMeta is the sysbox element in every domain's <metadata>: the ownership anchors (S16) and
// the files this generation runs from.
type ownerMeta struct {
	XMLName    xml.Name `xml:"https://zyvor.dev/sysbox/libvirt/1 owner"`
	Topology   string   `xml:"topology,attr"`
	Address    string   `xml:"address,attr"`
	Type       string   `xml:"type,attr"`
	Generation string   `xml:"generation,attr"`
	Marker     string   `xml:"marker,attr"`
	Overlay    string   `xml:"overlay,attr,omitempty"`
	Baseline   string   `xml:"baseline,attr,omitempty"` // digest of the disk artifact
	Kernel     string   `xml:"kernel,attr,omitempty"`   // digest of the kernel artifact
	SnapKey    string   `xml:"snapkey,attr,omitempty"`  // snapKey of the spec (snapshot.go)
	Snapshot   string   `xml:"snapshot,attr,omitempty"` // stream digest of the snapshot the overlay sits on
	SnapGen    string   `xml:"snapgen,attr,omitempty"`  // the generation that took that snapshot (its files' names)
	Cold       string   `xml:"cold,attr,omitempty"`     // why a reset could not use the snapshot
}

func newOwnerMeta(o substrate.Owner) ownerMeta {
	return ownerMeta{Topology: o.Topology, Address: o.Address, Type: o.Type,
		Generation: strconv.FormatUint(o.Generation, 10), Marker: o.Marker()}
}

// owner reads the anchors back; ok is false when one is missing or malformed or the marker
// disagrees with the separate attributes.
func (m ownerMeta) owner() (substrate.Owner, bool) {
	gen, err := strconv.ParseUint(m.Generation, 10, 64)
	if err != nil {
		return substrate.Owner{}, false
	}
	o := substrate.Owner{Topology: m.Topology, Address: m.Address, Type: m.Type, Generation: gen}
	if !o.Complete() {
		return o, false
	}
	mo, err := substrate.ParseMarker(m.Marker)
	if err != nil || !mo.Equal(o) {
		return o, false
	}
	return o, true
}

// findMeta finds the sysbox element among a domain's metadata (other tools may keep theirs there
// too). found is false when there is none.
func findMeta(dom *libvirtxml.Domain) (ownerMeta, bool) {
	if dom.Metadata == nil || dom.Metadata.XML == "" {
		return ownerMeta{}, false
	}
	dec := xml.NewDecoder(strings.NewReader(dom.Metadata.XML))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ownerMeta{}, false // io.EOF or malformed: no sysbox element
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if se.Name.Space == metadataNS && se.Name.Local == "owner" {
			var m ownerMeta
			if err := dec.DecodeElement(&m, &se); err != nil {
				return ownerMeta{}, false
			}
			return m, true
		}
		if err := dec.Skip(); err != nil && !errors.Is(err, io.EOF) {
			return ownerMeta{}, false
		}
	}
}

// checkOwned compares a domain's sysbox metadata with want (all anchors, generation included).
func checkOwned(what string, dom *libvirtxml.Domain, want substrate.Owner) (ownerMeta, error) {
	if !want.Complete() {
		return ownerMeta{}, fmt.Errorf("%s: owner %+v is incomplete: %w", what, want, driver.ErrNotOwned)
	}
	m, found := findMeta(dom)
	if !found {
		return m, fmt.Errorf("%s: no sysbox metadata: %w", what, driver.ErrNotOwned)
	}
	got, ok := m.owner()
	if !ok {
		return m, fmt.Errorf("%s: incomplete or inconsistent sysbox metadata: %w", what, driver.ErrNotOwned)
	}
	if !got.Equal(want) {
		return m, fmt.Errorf("%s: metadata names owner %s %s generation %d (topology %s), want %s %s generation %d (topology %s): %w",
			what, got.Type, got.Address, got.Generation, got.Topology, want.Type, want.Address, want.Generation, want.Topology, driver.ErrNotOwned)
	}
	return m, nil
}

// domainName is the deterministic name of owner o's domain. Names are for humans and for
// idempotent creation; ownership is always decided by metadata.
func domainName(o substrate.Owner) string {
	return fmt.Sprintf("sysbox-%s-g%d", o.ShortID(16), o.Generation)
}

// domainSpec is what a domain definition is built from.
type domainSpec struct {
	Type     string
	Name     string
	UUID     string
	Meta     ownerMeta
	CPUs     int
	MemoryMB int
	Overlay  string // qcow2 overlay file
	Kernel   string // "" for disk boot
	Initrd   string
	Cmdline  string
	Console  string // serial log file
}

// Defaults for a node that does not say.
const (
	defaultMemoryMB = 256
	defaultCPUs     = 1
	defaultCmdline  = "console=ttyS0 root=/dev/vda rw panic=-1"
	agentChannel    = "org.qemu.guest_agent.0"
)

// buildDomain renders the domain definition. NICs are added as devices by Attach.
func buildDomain(s domainSpec) (string, error) {
	meta, err := xml.Marshal(s.Meta)
	if err != nil {
		return "", err
	}
	if s.CPUs <= 0 {
		s.CPUs = defaultCPUs
	}
	if s.MemoryMB <= 0 {
		s.MemoryMB = defaultMemoryMB
	}
	os := &libvirtxml.DomainOS{Type: &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"}}
	if s.Kernel != "" {
		os.Kernel, os.Initrd, os.Cmdline = s.Kernel, s.Initrd, s.Cmdline
		if os.Cmdline == "" {
			os.Cmdline = defaultCmdline
		}
	} else {
		os.BootDevices = []libvirtxml.DomainBootDevice{{Dev: "hd"}}
	}
	port := uint(0)
	dom := &libvirtxml.Domain{
		Type:     s.Type,
		Name:     s.Name,
		UUID:     s.UUID,
		Metadata: &libvirtxml.DomainMetadata{XML: string(meta)},
		Memory:   &libvirtxml.DomainMemory{Value: uint(s.MemoryMB), Unit: "MiB"},
		VCPU:     &libvirtxml.DomainVCPU{Value: uint(s.CPUs)},
		OS:       os,
		Features: &libvirtxml.DomainFeatureList{ACPI: &libvirtxml.DomainFeature{}},
		// Power-off, crash: stay shut off (observed as degraded) rather than loop.
		OnPoweroff: "destroy", OnReboot: "restart", OnCrash: "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks: []libvirtxml.DomainDisk{{
				Device: "disk",
				Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: "qcow2"},
				Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: s.Overlay}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "vda", Bus: "virtio"},
			}},
			Serials: []libvirtxml.DomainSerial{{
				Source: &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{Path: s.Console}},
				Target: &libvirtxml.DomainSerialTarget{Port: &port},
			}},
			Channels: []libvirtxml.DomainChannel{{
				Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
				Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: agentChannel}},
			}},
			MemBalloon: &libvirtxml.DomainMemBalloon{Model: "none"},
		},
	}
	return dom.Marshal()
}

// nicDevice is the <interface> of one attachment: the sysbox-made tap, not managed by libvirt.
func nicDevice(tap, mac string) libvirtxml.DomainInterface {
	return libvirtxml.DomainInterface{
		Source: &libvirtxml.DomainInterfaceSource{Ethernet: &libvirtxml.DomainInterfaceSourceEthernet{}},
		Target: &libvirtxml.DomainInterfaceTarget{Dev: tap, Managed: "no"},
		MAC:    &libvirtxml.DomainInterfaceMAC{Address: mac},
		Model:  &libvirtxml.DomainInterfaceModel{Type: "virtio"},
	}
}

// User aliases ("ua-" and [A-Za-z0-9_-], libvirt's rule) survive in the persistent definition;
// sysbox names each interface's attachment with one. A name outside that set is hex-encoded.
const (
	aliasPlain = "ua-sysbox-a-"
	aliasHex   = "ua-sysbox-h-"
)

func attachmentAlias(name string) *libvirtxml.DomainAlias {
	plain := name != ""
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			plain = false
			break
		}
	}
	if plain {
		return &libvirtxml.DomainAlias{Name: aliasPlain + name}
	}
	return &libvirtxml.DomainAlias{Name: aliasHex + hex.EncodeToString([]byte(name))}
}

// attachmentOf reads the attachment name back from an interface's alias.
func attachmentOf(ifc libvirtxml.DomainInterface) (string, bool) {
	if ifc.Alias == nil {
		return "", false
	}
	if n, ok := strings.CutPrefix(ifc.Alias.Name, aliasPlain); ok && n != "" {
		return n, true
	}
	if h, ok := strings.CutPrefix(ifc.Alias.Name, aliasHex); ok {
		if b, err := hex.DecodeString(h); err == nil && len(b) > 0 {
			return string(b), true
		}
	}
	return "", false
}

// findNIC returns the domain's interface on tap, if any.
func findNIC(dom *libvirtxml.Domain, tap string) (libvirtxml.DomainInterface, bool) {
	if dom.Devices == nil {
		return libvirtxml.DomainInterface{}, false
	}
	for _, ifc := range dom.Devices.Interfaces {
		if ifc.Target != nil && ifc.Target.Dev == tap {
			return ifc, true
		}
	}
	return libvirtxml.DomainInterface{}, false
}

func parseDomain(s string) (*libvirtxml.Domain, error) {
	dom := &libvirtxml.Domain{}
	if err := dom.Unmarshal(s); err != nil {
		return nil, fmt.Errorf("domain XML: %w", err)
	}
	return dom, nil
}
