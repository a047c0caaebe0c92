package libvirt

import (
	"context"
	"encoding/binary"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/vishvananda/netlink"
	"libvirt.org/go/libvirtxml"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/pkg/substrate"
)

var _ driver.Importer = (*Driver)(nil)

// ImportNode adopts the domain externalID (its UUID or its name) as owner's node (S22). sysbox
// writes nothing onto it: the domain's persistent definition must already carry the sysbox
// <metadata> owner element for exactly owner (topology, address, type, generation and the
// marker that encodes them), as sysbox writes it; a refused import prints that element. A
// domain sysbox cannot manage is driver.ErrInvalid: another domain type, not exactly one disk
// that is a qcow2 overlay file (its backing chain's root is the immutable baseline), no guest
// agent channel (unless readiness is off), or an interface that is not <interface
// type='ethernet'> on a tap carrying owner's marker, enslaved to a bridge and named by sysbox's
// attachment alias. The result is normalized: the baseline's digest (Ref is its store directory
// when it is a stored artifact), the kernel and its command line, memory, vCPUs, and one
// attachment per interface (name, MAC, bridge; the addresses and gateway the guest agent
// reports when the domain runs).
func (d *Driver) ImportNode(ctx context.Context, externalID string, owner substrate.Owner) (substrate.ImportedNode, error) {
	what := fmt.Sprintf("import %s from domain %s", owner.Address, externalID)
	c, err := d.conn(ctx)
	if err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", what, err)
	}
	var dom golibvirt.Domain
	if u, uerr := parseUUID(externalID); uerr == nil {
		dom, err = c.DomainLookupByUUID(u)
	} else {
		dom, err = c.DomainLookupByName(externalID)
	}
	if err != nil {
		return substrate.ImportedNode{}, apiErr(what, err)
	}
	x, err := domainXML(c, dom)
	if err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := checkOwned(what, x, owner); err != nil {
		want, _ := xml.Marshal(newOwnerMeta(owner))
		return substrate.ImportedNode{}, fmt.Errorf("%w; a domain is importable when its <metadata> holds %s", err, want)
	}
	if x.Type != d.domainType {
		return substrate.ImportedNode{}, fmt.Errorf("%s: domain type %q, this driver runs %q domains: %w", what, x.Type, d.domainType, driver.ErrInvalid)
	}
	out := substrate.ImportedNode{MemoryMB: memoryMiB(x.Memory)}
	if x.VCPU != nil {
		out.CPUs = int(x.VCPU.Value)
	}
	overlay, err := importDisk(x)
	if err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", what, err)
	}
	if out.Artifact, err = d.importBaseline(ctx, overlay); err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: disk %s: %w", what, overlay, err)
	}
	if x.OS != nil && x.OS.Kernel != "" {
		if out.Kernel, err = d.importKernel(ctx, x.OS.Kernel); err != nil {
			return substrate.ImportedNode{}, fmt.Errorf("%s: kernel %s: %w", what, x.OS.Kernel, err)
		}
		out.Command = strings.Fields(x.OS.Cmdline)
	}
	if d.readyTimeout >= 0 && !hasAgentChannel(x) {
		return substrate.ImportedNode{}, fmt.Errorf("%s: no virtio channel %s (the guest agent sysbox reaches the guest through): %w", what, agentChannel, driver.ErrInvalid)
	}
	if out.Attachments, err = importNICs(x, owner); err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", what, err)
	}
	up, _, err := running(c, dom)
	if err != nil {
		return substrate.ImportedNode{}, fmt.Errorf("%s: %w", what, err)
	}
	if up && len(out.Attachments) > 0 {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := guestAddresses(actx, c, dom, out.Attachments)
		cancel()
		if err != nil {
			return substrate.ImportedNode{}, fmt.Errorf("%s: the domain runs but its guest addresses cannot be read: %w", what, err)
		}
	}
	out.Handle = nodeHandle(nodePrivate{UUID: formatUUID(dom.UUID), Name: dom.Name, Overlay: overlay, Marker: owner.Marker()})
	return out, nil
}

// memoryMiB converts a domain's <memory> to MiB (libvirt writes KiB).
func memoryMiB(m *libvirtxml.DomainMemory) int {
	if m == nil {
		return 0
	}
	v := uint64(m.Value)
	switch strings.ToLower(m.Unit) {
	case "b", "bytes":
		return int(v >> 20)
	case "", "k", "kib":
		return int(v >> 10)
	case "kb":
		return int(v * 1000 >> 20)
	case "m", "mib":
		return int(v)
	case "mb":
		return int(v * 1000 * 1000 >> 20)
	case "g", "gib":
		return int(v << 10)
	case "gb":
		return int(v * 1000 * 1000 * 1000 >> 20)
	}
	return 0
}

// importDisk returns the file of the domain's only disk, which must be a qcow2 file (an
// overlay: importBaseline checks that it has a backing file).
func importDisk(x *libvirtxml.Domain) (string, error) {
	if x.Devices == nil || len(x.Devices.Disks) != 1 {
		n := 0
		if x.Devices != nil {
			n = len(x.Devices.Disks)
		}
		return "", fmt.Errorf("%d disks, sysbox manages exactly one (the node's overlay): %w", n, driver.ErrInvalid)
	}
	disk := x.Devices.Disks[0]
	if disk.Device != "" && disk.Device != "disk" {
		return "", fmt.Errorf("the only disk is a %s, want a disk: %w", disk.Device, driver.ErrInvalid)
	}
	if disk.Source == nil || disk.Source.File == nil || disk.Source.File.File == "" {
		return "", fmt.Errorf("the disk is not a file: %w", driver.ErrInvalid)
	}
	if disk.Driver == nil || disk.Driver.Type != "qcow2" {
		return "", fmt.Errorf("disk %s is not driven as qcow2 (an overlay on an immutable baseline): %w", disk.Source.File.File, driver.ErrInvalid)
	}
	return disk.Source.File.File, nil
}

// maxChain bounds a backing chain (overlay, snapshot disk, baseline is 3).
const maxChain = 8

// backingFile reads a qcow2 file's backing file name (relative names are relative to the
// file's directory); "" when it has none. A file that is not qcow2 has none.
func backingFile(path string) (string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	var hdr [20]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil || string(hdr[:4]) != "QFI\xfb" {
		return "", false, nil
	}
	off, size := binary.BigEndian.Uint64(hdr[8:16]), binary.BigEndian.Uint32(hdr[16:20])
	if off == 0 {
		return "", true, nil
	}
	if size == 0 || size > 1023 { // qemu's limit
		return "", true, fmt.Errorf("%s: qcow2 backing file name of %d bytes", path, size)
	}
	name := make([]byte, size)
	if _, err := f.ReadAt(name, int64(off)); err != nil {
		return "", true, fmt.Errorf("%s: backing file name: %w", path, err)
	}
	b := string(name)
	if !filepath.IsAbs(b) {
		b = filepath.Join(filepath.Dir(path), b)
	}
	return b, true, nil
}

// importBaseline follows overlay's backing chain to its root, the baseline, and identifies it:
// a stored artifact (StateDir/store/<hex>/disk) is verified and named by its digest; any other
// file by the sha256 of its content. An overlay without a backing file is refused: the domain
// writes straight into its only image, and there is no immutable baseline to reset to.
func (d *Driver) importBaseline(ctx context.Context, overlay string) (*substrate.ArtifactIdentity, error) {
	cur := overlay
	for i := 0; ; i++ {
		next, isQCOW2, err := backingFile(cur)
		if err != nil {
			return nil, err
		}
		if i == 0 && !isQCOW2 {
			return nil, fmt.Errorf("not a qcow2 file: %w", driver.ErrInvalid)
		}
		if next == "" {
			break
		}
		if i == maxChain {
			return nil, fmt.Errorf("backing chain longer than %d files: %w", maxChain, driver.ErrInvalid)
		}
		cur = next
	}
	if cur == overlay {
		return nil, fmt.Errorf("no backing file: the domain writes into its only image, so there is no immutable baseline to reset to: %w", driver.ErrInvalid)
	}
	kind := KindRootfs
	if _, isQCOW2, _ := backingFile(cur); isQCOW2 {
		kind = KindQCOW2
	}
	if dir := filepath.Dir(cur); filepath.Base(cur) == fileDisk && filepath.Dir(dir) == d.storeDir() {
		id := substrate.ArtifactIdentity{Kind: kind, Source: cur, Digest: "sha256:" + filepath.Base(dir), Ref: dir}
		if err := d.VerifyArtifact(ctx, id); err != nil {
			return nil, fmt.Errorf("baseline %s: %w", cur, err)
		}
		return &id, nil
	}
	digest, size, err := substrate.DigestSource(cur)
	if err != nil {
		return nil, fmt.Errorf("baseline: %w", err)
	}
	return &substrate.ArtifactIdentity{Kind: kind, Source: cur, Digest: digest, Size: size}, nil
}

// importKernel identifies a direct-boot kernel: a stored kernel artifact by its directory's
// digest (verified), any other file by its content.
func (d *Driver) importKernel(ctx context.Context, kernel string) (*substrate.ArtifactIdentity, error) {
	if dir := filepath.Dir(kernel); filepath.Base(kernel) == fileKernel && filepath.Dir(dir) == d.storeDir() {
		id := substrate.ArtifactIdentity{Kind: KindKernel, Source: dir, Digest: "sha256:" + filepath.Base(dir), Ref: dir}
		if err := d.VerifyArtifact(ctx, id); err != nil {
			return nil, err
		}
		return &id, nil
	}
	digest, size, err := substrate.DigestSource(kernel)
	if err != nil {
		return nil, err
	}
	return &substrate.ArtifactIdentity{Kind: KindKernel, Source: kernel, Digest: digest, Size: size}, nil
}

func hasAgentChannel(x *libvirtxml.Domain) bool {
	if x.Devices == nil {
		return false
	}
	for _, ch := range x.Devices.Channels {
		if ch.Target != nil && ch.Target.VirtIO != nil && ch.Target.VirtIO.Name == agentChannel {
			return true
		}
	}
	return false
}

// importNICs turns the domain's interfaces into attachment states: each must be an ethernet
// interface on a tap that carries owner's marker and sits on a bridge, with a MAC and sysbox's
// attachment alias. Sorted by attachment name.
func importNICs(x *libvirtxml.Domain, owner substrate.Owner) ([]substrate.AttachmentState, error) {
	if x.Devices == nil {
		return nil, nil
	}
	var out []substrate.AttachmentState
	seen := map[string]bool{}
	for i, ifc := range x.Devices.Interfaces {
		if ifc.Source == nil || ifc.Source.Ethernet == nil || ifc.Target == nil || ifc.Target.Dev == "" {
			return nil, fmt.Errorf("interface %d is not <interface type='ethernet'> on a named tap (sysbox wires NICs through its own taps): %w", i, driver.ErrInvalid)
		}
		tap := ifc.Target.Dev
		name, ok := attachmentOf(ifc)
		if !ok || seen[name] {
			return nil, fmt.Errorf("interface on tap %s: no (or a repeated) sysbox attachment alias %s<name>: %w", tap, aliasPlain, driver.ErrInvalid)
		}
		seen[name] = true
		if ifc.MAC == nil || ifc.MAC.Address == "" {
			return nil, fmt.Errorf("interface on tap %s: no MAC: %w", tap, driver.ErrInvalid)
		}
		link, err := netlink.LinkByName(tap)
		if linkNotFound(err) {
			return nil, fmt.Errorf("interface on tap %s: no such link: %w", tap, driver.ErrInvalid)
		}
		if err != nil {
			return nil, fmt.Errorf("interface on tap %s: %w: %w", tap, driver.ErrUnavailable, err)
		}
		if err := tapOwned(link, owner); err != nil {
			return nil, err
		}
		br, err := netlink.LinkByIndex(link.Attrs().MasterIndex)
		if link.Attrs().MasterIndex == 0 || err != nil || br.Type() != "bridge" {
			return nil, fmt.Errorf("interface on tap %s: the tap is on no bridge: %w", tap, driver.ErrInvalid)
		}
		out = append(out, substrate.AttachmentState{Name: name, MAC: strings.ToLower(ifc.MAC.Address),
			Private: nicEnvelope(nicPrivate{Tap: tap, Bridge: br.Attrs().Name, Marker: owner.Marker()})})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// guestAddresses fills atts' IPv4 addresses (from guest-network-get-interfaces, by MAC) and the
// gateway of the attachment the guest's default route leaves through (`ip -4 route show`
// through guest-exec).
func guestAddresses(ctx context.Context, c conn, dom golibvirt.Domain, atts []substrate.AttachmentState) error {
	ag := agentClient(c, dom)
	ifs, err := ag.Interfaces(ctx)
	if err != nil {
		return err
	}
	byName := map[string]string{} // guest interface name → MAC
	byMAC := map[string]int{}
	for i, a := range atts {
		byMAC[a.MAC] = i
	}
	for _, ifc := range ifs {
		mac := strings.ToLower(ifc.HardwareAddress)
		byName[ifc.Name] = mac
		i, ok := byMAC[mac]
		if !ok {
			continue
		}
		for _, ip := range ifc.IPAddresses {
			if ip.Type == "ipv4" {
				atts[i].IPv4 = append(atts[i].IPv4, fmt.Sprintf("%s/%d", ip.Address, ip.Prefix))
			}
		}
		sort.Strings(atts[i].IPv4)
	}
	st, err := ag.Run(ctx, "ip", "-4", "route", "show")
	if err != nil {
		return err
	}
	// "default via 198.51.100.1 dev eth0 ..."
	var via, dev string
	for _, line := range strings.Split(string(st.OutData), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "default" {
			continue
		}
		for i := 1; i+1 < len(f); i++ {
			switch f[i] {
			case "via":
				via = f[i+1]
			case "dev":
				dev = f[i+1]
			}
		}
		break
	}
	if i, ok := byMAC[byName[dev]]; ok && via != "" {
		atts[i].Gateway = via
	}
	return nil
}
