package libvirt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// The reset fast path (S15). The first time a generation whose overlay sits directly on the
// baseline answers its agent, the driver saves it (libvirt save image: memory and device state),
// copies its overlay as it was at that instant (the disk the saved memory belongs to) and
// restores it, so the node runs on. That pair is a snapshot of the node, named after the
// generation that took it, beside the overlays:
//
//	sysbox-<id>-snap-g<N>.owner  owner record (generation N, which took it), written first: audit
//	sysbox-<id>-snap-g<N>.qcow2  the disk at save time (an overlay of the baseline), read-only
//	sysbox-<id>-snap-g<N>.save   the save image; its header XML is rewritten before each restore
//	sysbox-<id>-snap-g<N>.json   manifest, written last (fsync, rename): without it nothing is valid
//
// A snapshot is never replaced: a later generation that boots cold on the baseline takes its own
// under its own name, so a generation whose overlay sits on an older snapshot disk (its domain
// metadata names that generation, snapgen) keeps the backing chain it was defined on, also when
// it is kept after a failed reset and started cold again later. A reset uses the newest usable
// snapshot; deleting a generation prunes the node's snapshots that no remaining domain of the
// node sits on, except the newest, and the node's last domain takes them all.
//
// A reset whose spec matches the manifest's key and whose disk still has the recorded digest
// puts the new generation's overlay on the snapshot disk and, at its first start, restores the
// save image (stream re-hashed first) into the new domain instead of booting it. Anything
// missing, changed or failing falls back to a cold boot, and the generation's start record
// (observed as started_from) says which path ran and why.

// snapManifestVersion is the version of snapManifest.
const snapManifestVersion = 1

// snapManifest describes a node's baseline snapshot.
type snapManifest struct {
	Version      int        `json:"version"`
	Marker       string     `json:"marker"` // the generation that took it
	Key          string     `json:"key"`    // snapKey of the spec it was taken under
	Header       saveHeader `json:"header"`
	XML          string     `json:"xml"` // the domain XML libvirt saved
	Cookie       string     `json:"cookie,omitempty"`
	StreamSHA256 string     `json:"stream_sha256"`
	StreamSize   int64      `json:"stream_size"`
	DiskSHA256   string     `json:"disk_sha256"`
}

// snapBase is the path prefix of the snapshot files generation o takes.
func (d *Driver) snapBase(o substrate.Owner) string {
	return d.snapshotBase(o, o.Generation)
}

// snapshotBase is the path prefix of the snapshot o's node took at generation gen.
func (d *Driver) snapshotBase(o substrate.Owner, gen uint64) string {
	return filepath.Join(d.overlayDir(o.Topology), fmt.Sprintf("%s%d", snapPrefix(o), gen))
}

// snapPrefix starts the file names of every snapshot of o's node.
func snapPrefix(o substrate.Owner) string { return fmt.Sprintf("sysbox-%s-snap-g", o.ShortID(16)) }

// snapshotGens lists the generations that left snapshot files of o's node (complete or not),
// newest first.
func (d *Driver) snapshotGens(o substrate.Owner) ([]uint64, error) {
	ents, err := os.ReadDir(d.overlayDir(o.Topology))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	seen := map[uint64]bool{}
	var out []uint64
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), snapPrefix(o))
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(rest, ".")
		if gen, err := strconv.ParseUint(num, 10, 64); err == nil && !seen[gen] {
			seen[gen] = true
			out = append(out, gen)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] > out[j] })
	return out, nil
}

// startRecord sits beside a generation's overlay once it has been started: how (snapshot or
// cold, and why). Its absence marks a generation that never ran.
func startRecord(overlay string) string { return strings.TrimSuffix(overlay, ".qcow2") + ".start" }

// snapKey is what a snapshot must have been taken under to be restored for spec: everything of
// the domain the saved guest depends on.
func snapKey(domainType string, spec substrate.NodeSpec) string {
	cmdline := strings.Join(spec.Command, " ")
	kernel := ""
	if spec.Kernel != nil {
		kernel = spec.Kernel.Digest
		if cmdline == "" {
			cmdline = defaultCmdline
		}
	}
	mem, cpus := spec.MemoryMB, spec.CPUs
	if mem <= 0 {
		mem = defaultMemoryMB
	}
	if cpus <= 0 {
		cpus = defaultCPUs
	}
	base := ""
	if spec.Artifact != nil {
		base = spec.Artifact.Digest
	}
	sum := sha256.Sum256([]byte(strings.Join([]string{domainType, base, kernel, cmdline,
		strconv.Itoa(mem), strconv.Itoa(cpus)}, "\x00")))
	return hex.EncodeToString(sum[:])
}

func readSnapManifest(path string) (snapManifest, error) {
	b, ok, err := durable.ReadFileIfExists(path)
	if err != nil {
		return snapManifest{}, err
	}
	if !ok {
		return snapManifest{}, fmt.Errorf("no snapshot manifest %s", path)
	}
	var m snapManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return snapManifest{}, fmt.Errorf("snapshot manifest %s: %w", path, err)
	}
	if m.Version != snapManifestVersion {
		return snapManifest{}, fmt.Errorf("snapshot manifest %s: version %d, want %d", path, m.Version, snapManifestVersion)
	}
	return m, nil
}

// usableSnapshot returns the newest snapshot of o's node that may back spec's new generation:
// manifest present and taken by that generation of this resource, key equal, disk digest
// unchanged, save image of the recorded length. The stream itself is re-hashed right before the
// restore. The error says why none is (the newest one's reason).
func (d *Driver) usableSnapshot(o substrate.Owner, spec substrate.NodeSpec) (snapManifest, error) {
	gens, err := d.snapshotGens(o)
	if err != nil {
		return snapManifest{}, err
	}
	first := fmt.Errorf("no snapshot of %s in %s", o.Address, d.overlayDir(o.Topology))
	for i, gen := range gens {
		m, err := d.checkSnapshot(o, gen, spec)
		if err == nil {
			return m, nil
		}
		if i == 0 {
			first = err
		}
	}
	return snapManifest{}, first
}

// checkSnapshot checks the snapshot o's node took at generation gen against spec.
func (d *Driver) checkSnapshot(o substrate.Owner, gen uint64, spec substrate.NodeSpec) (snapManifest, error) {
	base := d.snapshotBase(o, gen)
	m, err := readSnapManifest(base + ".json")
	if err != nil {
		return m, err
	}
	mo, err := substrate.ParseMarker(m.Marker)
	if err != nil || !mo.SameResource(o) || mo.Generation != gen {
		return m, fmt.Errorf("snapshot %s belongs to %q, not generation %d of %s", base, m.Marker, gen, o.Address)
	}
	if m.Key != snapKey(d.domainType, spec) {
		return m, fmt.Errorf("snapshot %s was taken under another baseline, kernel, command line, memory or CPU count", base)
	}
	got, _, err := substrate.FileSHA256(base + ".qcow2")
	if err != nil {
		return m, fmt.Errorf("snapshot disk: %w", err)
	}
	if got != m.DiskSHA256 {
		return m, fmt.Errorf("snapshot disk %s.qcow2 is sha256:%s, want sha256:%s", base, got, m.DiskSHA256)
	}
	fi, err := os.Stat(base + ".save")
	if err != nil {
		return m, fmt.Errorf("snapshot image: %w", err)
	}
	if fi.Size() != m.Header.streamOffset()+m.StreamSize {
		return m, fmt.Errorf("snapshot image %s.save is %d bytes, want %d", base, fi.Size(), m.Header.streamOffset()+m.StreamSize)
	}
	return m, nil
}

// takeSnapshot saves the running domain (which stops it), copies its overlay, restores it and
// records the pair as generation o's snapshot. The domain runs again when it returns, even on
// error (a cold start if the restore fails). Files are written under temporary names and the
// manifest last, so an interruption leaves no snapshot that looks valid; a complete snapshot is
// never taken again (domains may sit on its disk).
func (d *Driver) takeSnapshot(ctx context.Context, what string, c conn, dom golibvirt.Domain, o substrate.Owner, m ownerMeta) error {
	base := d.snapBase(o)
	if _, ok, err := durable.ReadFileIfExists(base + ".json"); err != nil || ok {
		return err
	}
	if err := durable.WriteFile(base+".owner", []byte(o.Marker()+"\n"), 0o644); err != nil {
		return fmt.Errorf("snapshot owner record: %w", err)
	}
	tmpSave, tmpDisk := base+".save.tmp", base+".qcow2.tmp"
	for _, p := range []string{tmpSave, tmpDisk} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	defer os.Remove(tmpSave)
	defer os.Remove(tmpDisk)
	if err := c.DomainSave(dom, tmpSave); err != nil {
		return apiErr(fmt.Sprintf("domain %s: save", dom.Name), err)
	}
	// The domain is stopped: its overlay is exactly the disk the saved memory belongs to.
	copyErr := copyFileSync(m.Overlay, tmpDisk)
	if err := c.DomainRestore(tmpSave); err != nil {
		if cerr := c.DomainCreate(dom); cerr != nil {
			return errors.Join(apiErr(fmt.Sprintf("domain %s: restore after save", dom.Name), err), apiErr("cold start", cerr))
		}
		if rerr := d.ready(ctx, what, c, dom, nil); rerr != nil {
			return rerr
		}
		return apiErr(fmt.Sprintf("domain %s: restore after save (started cold instead)", dom.Name), err)
	}
	if err := d.ready(ctx, what, c, dom, nil); err != nil {
		return err
	}
	if copyErr != nil {
		return fmt.Errorf("copy overlay %s: %w", m.Overlay, copyErr)
	}
	h, xmlDoc, cookie, err := readSaveImage(tmpSave)
	if err != nil {
		return err
	}
	man := snapManifest{Version: snapManifestVersion, Marker: o.Marker(), Key: m.SnapKey, Header: h, XML: xmlDoc, Cookie: cookie}
	if man.StreamSHA256, man.StreamSize, err = streamSHA256(tmpSave, h.streamOffset()); err != nil {
		return err
	}
	if man.DiskSHA256, _, err = substrate.FileSHA256(tmpDisk); err != nil {
		return err
	}
	if err := syncFile(tmpSave); err != nil {
		return err
	}
	// No manifest yet (checked above): no domain sits on these names, which a killed earlier
	// attempt may have left.
	if err := os.Rename(tmpSave, base+".save"); err != nil {
		return err
	}
	if err := os.Rename(tmpDisk, base+".qcow2"); err != nil {
		return err
	}
	if err := durable.SyncDir(filepath.Dir(base)); err != nil {
		return err
	}
	b, err := json.Marshal(man)
	if err != nil {
		return err
	}
	return durable.WriteFile(base+".json", b, 0o644)
}

func syncFile(p string) error {
	f, err := os.OpenFile(p, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// restoreSnapshot starts the defined, stopped domain x from o's snapshot: the manifest must be
// the one its overlay was built on (m.Snapshot), the stream must still hash to it, and the saved
// XML is retargeted to this domain (name, UUID, metadata, overlay, console, taps by MAC) and
// written into the image before libvirt restores it.
func (d *Driver) restoreSnapshot(c conn, x *libvirtxml.Domain, o substrate.Owner, m ownerMeta) error {
	gen, err := strconv.ParseUint(m.SnapGen, 10, 64)
	if err != nil {
		return fmt.Errorf("domain %s sits on a snapshot but names no snapshot generation (%q)", x.Name, m.SnapGen)
	}
	base := d.snapshotBase(o, gen)
	man, err := readSnapManifest(base + ".json")
	if err != nil {
		return err
	}
	if man.StreamSHA256 != m.Snapshot {
		return fmt.Errorf("snapshot %s was replaced since this generation was defined on it", base)
	}
	done := d.step(o.Address, "hash snapshot stream")
	sum, n, err := streamSHA256(base+".save", man.Header.streamOffset())
	if err != nil {
		return err
	}
	done()
	if sum != man.StreamSHA256 || n != man.StreamSize {
		return fmt.Errorf("snapshot image %s.save: stream is sha256:%s (%d bytes), want sha256:%s (%d bytes)", base, sum, n, man.StreamSHA256, man.StreamSize)
	}
	doc, err := retarget(man.XML, x)
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", base, err)
	}
	if err := rewriteSaveImage(base+".save", man.Header, doc, man.Cookie); err != nil {
		return err
	}
	done = d.step(o.Address, "restore")
	if err := c.DomainRestore(base + ".save"); err != nil {
		return apiErr("restore "+base+".save into domain "+x.Name, err)
	}
	done()
	return nil
}

// retarget turns the saved domain XML into the definition of domain x: x's name, UUID and
// metadata, its overlay and console file, and x's taps for the saved NICs (matched by MAC; the
// set of MACs must be the same). Devices, their addresses and the machine stay as saved.
func retarget(saved string, x *libvirtxml.Domain) (string, error) {
	t, err := parseDomain(saved)
	if err != nil {
		return "", err
	}
	t.Name, t.UUID, t.Metadata = x.Name, x.UUID, x.Metadata
	if t.Devices == nil || x.Devices == nil || len(t.Devices.Disks) != 1 || len(x.Devices.Disks) != 1 {
		return "", errors.New("want exactly one disk in the saved and the new domain")
	}
	src := x.Devices.Disks[0].Source
	if src == nil || src.File == nil || t.Devices.Disks[0].Source == nil || t.Devices.Disks[0].Source.File == nil {
		return "", errors.New("disk is not a file")
	}
	t.Devices.Disks[0].Source.File.File = src.File.File
	if len(x.Devices.Serials) == 1 && x.Devices.Serials[0].Source != nil && x.Devices.Serials[0].Source.File != nil {
		console := x.Devices.Serials[0].Source.File.Path
		for i := range t.Devices.Serials {
			if s := t.Devices.Serials[i].Source; s != nil && s.File != nil {
				s.File.Path = console
			}
		}
		for i := range t.Devices.Consoles {
			if s := t.Devices.Consoles[i].Source; s != nil && s.File != nil {
				s.File.Path = console
			}
		}
	}
	taps := map[string]string{}
	for _, ifc := range x.Devices.Interfaces {
		if ifc.MAC != nil && ifc.Target != nil {
			taps[strings.ToLower(ifc.MAC.Address)] = ifc.Target.Dev
		}
	}
	if len(taps) != len(t.Devices.Interfaces) {
		return "", fmt.Errorf("the saved guest has %d NICs, the new generation %d", len(t.Devices.Interfaces), len(taps))
	}
	for i := range t.Devices.Interfaces {
		ifc := &t.Devices.Interfaces[i]
		if ifc.MAC == nil || ifc.Target == nil || taps[strings.ToLower(ifc.MAC.Address)] == "" {
			return "", fmt.Errorf("the saved guest's NIC %d has no counterpart with its MAC in the new generation", i)
		}
		ifc.Target.Dev = taps[strings.ToLower(ifc.MAC.Address)]
	}
	return t.Marshal()
}

// pruneSnapshots deletes the snapshots of o's node that none of remaining (the node's domains
// left) sits on, except the newest complete one (what the next reset uses); with no domain left
// it deletes them all.
func (d *Driver) pruneSnapshots(o substrate.Owner, remaining []ownedDomain) error {
	gens, err := d.snapshotGens(o)
	if err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	keep := map[uint64]bool{}
	for _, od := range remaining {
		if od.snapGen != 0 {
			keep[od.snapGen] = true
		}
	}
	if len(remaining) > 0 {
		for _, gen := range gens {
			if _, ok, _ := durable.ReadFileIfExists(d.snapshotBase(o, gen) + ".json"); ok {
				keep[gen] = true
				break
			}
		}
	}
	for _, gen := range gens {
		if keep[gen] {
			continue
		}
		base := d.snapshotBase(o, gen)
		for _, s := range []string{".json", ".save", ".qcow2", ".save.tmp", ".qcow2.tmp", ".owner"} {
			if err := os.Remove(base + s); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove snapshot file: %w", err)
			}
		}
	}
	return nil
}
