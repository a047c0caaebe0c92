package libvirt

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/guestvm"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// privateVersion is the version of nodePrivate inside a node handle's envelope.
const privateVersion = 1

// nodePrivate is the provider-private part of a node handle (S7).
type nodePrivate struct {
	UUID    string `json:"uuid"`
	Name    string `json:"name"`
	Overlay string `json:"overlay"`
	Marker  string `json:"marker"` // the owner the domain was defined for
}

func nodeHandle(p nodePrivate) substrate.Handle {
	return substrate.Handle{Driver: Name, ExternalID: p.UUID, Private: substrate.Seal(Name, privateVersion, p)}
}

func decodeNodePrivate(env substrate.Envelope) (nodePrivate, error) {
	var p nodePrivate
	return p, env.Open(Name, privateVersion, &p)
}

// CheckPrivate refuses envelopes of unknown versions and envelopes lacking the domain UUID or
// the ownership marker that destructive calls compare against.
func (d *Driver) CheckPrivate(env substrate.Envelope) error {
	p, err := decodeNodePrivate(env)
	if err != nil {
		return fmt.Errorf("libvirt node envelope: %w", err)
	}
	if _, err := parseUUID(p.UUID); err != nil {
		return fmt.Errorf("libvirt node envelope: %v: %w", err, driver.ErrNotOwned)
	}
	if _, err := substrate.ParseMarker(p.Marker); err != nil {
		return fmt.Errorf("libvirt node envelope for domain %s: no ownership marker (%v): %w", p.Name, err, driver.ErrNotOwned)
	}
	return nil
}

func parseUUID(s string) (golibvirt.UUID, error) {
	var u golibvirt.UUID
	b, err := hex.DecodeString(strings.ReplaceAll(s, "-", ""))
	if err != nil || len(b) != len(u) {
		return u, fmt.Errorf("domain UUID %q is malformed", s)
	}
	copy(u[:], b)
	return u, nil
}

func formatUUID(u golibvirt.UUID) string {
	h := hex.EncodeToString(u[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func newUUID() string {
	var u golibvirt.UUID
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40 // version 4
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return formatUUID(u)
}

// overlayDir holds one topology's overlays (and their owner records): a directory per topology
// so that the audit finds them without a domain.
func (d *Driver) overlayDir(topology string) string {
	sum := sha256.Sum256([]byte(topology))
	return filepath.Join(d.stateDir, "overlays", hex.EncodeToString(sum[:8]))
}

func (d *Driver) overlayPath(o substrate.Owner) string {
	return filepath.Join(d.overlayDir(o.Topology), domainName(o)+".qcow2")
}

func (d *Driver) consolePath(o substrate.Owner) string {
	return filepath.Join(d.overlayDir(o.Topology), domainName(o)+".console.log")
}

// ownerRecord sits next to an overlay and names its owner, for the audit.
func ownerRecord(overlay string) string { return strings.TrimSuffix(overlay, ".qcow2") + ".owner" }

// lookupOwned finds h's domain by UUID, reads its definition and checks its metadata against owner.
func (d *Driver) lookupOwned(ctx context.Context, what string, h substrate.Handle, owner substrate.Owner) (conn, golibvirt.Domain, *libvirtxml.Domain, error) {
	c, err := d.conn(ctx)
	if err != nil {
		return nil, golibvirt.Domain{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	u, err := parseUUID(h.ExternalID)
	if err != nil {
		return nil, golibvirt.Domain{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	dom, err := c.DomainLookupByUUID(u)
	if err != nil {
		return nil, golibvirt.Domain{}, nil, apiErr(fmt.Sprintf("%s: domain %s", what, h.ExternalID), err)
	}
	x, err := domainXML(c, dom)
	if err != nil {
		return nil, dom, nil, fmt.Errorf("%s: %w", what, err)
	}
	if _, err := checkOwned(fmt.Sprintf("%s: domain %s (%s)", what, dom.Name, h.ExternalID), x, owner); err != nil {
		return nil, dom, x, err
	}
	return c, dom, x, nil
}

// domainXML reads a domain's persistent definition (what the next start uses, NICs included).
func domainXML(c conn, dom golibvirt.Domain) (*libvirtxml.Domain, error) {
	s, err := c.DomainGetXMLDesc(dom, golibvirt.DomainXMLInactive)
	if err != nil {
		return nil, apiErr("domain "+dom.Name+": read definition", err)
	}
	return parseDomain(s)
}

func running(c conn, dom golibvirt.Domain) (bool, string, error) {
	st, _, err := c.DomainGetState(dom, 0)
	if err != nil {
		return false, "", apiErr("domain "+dom.Name+": state", err)
	}
	return golibvirt.DomainState(st) == golibvirt.DomainRunning, stateName(st), nil
}

func stateName(st int32) string {
	switch golibvirt.DomainState(st) {
	case golibvirt.DomainRunning:
		return "running"
	case golibvirt.DomainBlocked:
		return "blocked"
	case golibvirt.DomainPaused:
		return "paused"
	case golibvirt.DomainShutdown:
		return "shutting-down"
	case golibvirt.DomainShutoff:
		return "shut-off"
	case golibvirt.DomainCrashed:
		return "crashed"
	case golibvirt.DomainPmsuspended:
		return "suspended"
	}
	return fmt.Sprintf("state-%d", st)
}

// CreateNode defines (does not start) spec's domain: a fresh qcow2 overlay backed by the stored
// baseline, direct kernel boot when spec.Kernel is set (spec.Command, joined, is then the kernel
// command line), the guest agent channel and the sysbox metadata. A domain of that name whose
// metadata proves it is spec's (a retried create) is adopted; any other holder of the name is
// left untouched (ErrNotOwned).
func (d *Driver) CreateNode(ctx context.Context, spec substrate.NodeSpec) (substrate.Handle, error) {
	return d.createNode(ctx, spec, nil, "", false)
}

// createNode is CreateNode; with snap, the overlay sits on that snapshot's disk and the first
// start restores it. cold says why a reset could not use a snapshot (kept in the metadata).
// verified says the caller has just verified spec's baseline and kernel (NewGeneration, before
// it touched the prior generation), so they are not hashed twice in one call.
func (d *Driver) createNode(ctx context.Context, spec substrate.NodeSpec, snap *snapManifest, cold string, verified bool) (substrate.Handle, error) {
	what := "node " + spec.Owner.Address
	if !spec.Owner.Complete() {
		return substrate.Handle{}, fmt.Errorf("%s: owner is incomplete: %w", what, driver.ErrNotOwned)
	}
	if spec.Artifact == nil || spec.Artifact.Ref == "" {
		return substrate.Handle{}, fmt.Errorf("%s: no resolved disk artifact: %w", what, driver.ErrInvalid)
	}
	if spec.Artifact.Kind != KindQCOW2 && spec.Artifact.Kind != KindRootfs {
		return substrate.Handle{}, fmt.Errorf("%s: artifact kind %q: want %s or %s: %w", what, spec.Artifact.Kind, KindQCOW2, KindRootfs, driver.ErrInvalid)
	}
	if spec.Kernel != nil && (spec.Kernel.Kind != KindKernel || spec.Kernel.Ref == "") {
		return substrate.Handle{}, fmt.Errorf("%s: kernel artifact %q is not a resolved %s: %w", what, spec.Kernel.Source, KindKernel, driver.ErrInvalid)
	}
	c, err := d.conn(ctx)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
	}
	name := domainName(spec.Owner)
	overlay := d.overlayPath(spec.Owner)
	if dom, err := c.DomainLookupByName(name); err == nil {
		x, err := domainXML(c, dom)
		if err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
		}
		if _, err := checkOwned(fmt.Sprintf("%s: domain %s already holds the name", what, name), x, spec.Owner); err != nil {
			return substrate.Handle{}, err
		}
		return nodeHandle(nodePrivate{UUID: formatUUID(dom.UUID), Name: name, Overlay: overlay, Marker: spec.Owner.Marker()}), nil
	} else if !golibvirt.IsNotFound(err) {
		return substrate.Handle{}, apiErr(fmt.Sprintf("%s: look up domain %s", what, name), err)
	}
	if !verified {
		if err := d.verifyInputs(ctx, spec); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	backing, format := filepath.Join(spec.Artifact.Ref, fileDisk), "qcow2"
	if spec.Artifact.Kind == KindRootfs {
		format = "raw"
	}
	meta := newOwnerMeta(spec.Owner)
	meta.Overlay, meta.Baseline, meta.SnapKey, meta.Cold = overlay, spec.Artifact.Digest, snapKey(d.domainType, spec), cold
	if snap != nil {
		// The snapshot's own files, named after the generation that took it: never replaced, so
		// this generation's backing chain stays what it was defined on.
		taker, err := substrate.ParseMarker(snap.Marker)
		if err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: snapshot manifest: %w", what, err)
		}
		backing, format = d.snapshotBase(spec.Owner, taker.Generation)+".qcow2", "qcow2"
		meta.Snapshot, meta.SnapGen = snap.StreamSHA256, strconv.FormatUint(taker.Generation, 10)
	}
	if err := d.createOverlay(ctx, spec.Owner, backing, format, overlay); err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
	}
	ds := domainSpec{Type: d.domainType, Name: name, UUID: newUUID(), Meta: meta, CPUs: spec.CPUs, MemoryMB: spec.MemoryMB,
		Overlay: overlay, Console: d.consolePath(spec.Owner)}
	if spec.Kernel != nil {
		meta.Kernel = spec.Kernel.Digest
		ds.Meta = meta
		ds.Kernel = filepath.Join(spec.Kernel.Ref, fileKernel)
		if _, err := os.Stat(filepath.Join(spec.Kernel.Ref, fileInitrd)); err == nil {
			ds.Initrd = filepath.Join(spec.Kernel.Ref, fileInitrd)
		}
		ds.Cmdline = strings.Join(spec.Command, " ")
	}
	xmlDoc, err := buildDomain(ds)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: domain XML: %w", what, err)
	}
	done := d.step(spec.Owner.Address, "define")
	dom, err := c.DomainDefineXML(xmlDoc)
	if err != nil {
		d.removeOverlay(overlay)
		return substrate.Handle{}, apiErr(fmt.Sprintf("%s: define domain %s", what, name), err)
	}
	done()
	return nodeHandle(nodePrivate{UUID: formatUUID(dom.UUID), Name: name, Overlay: overlay, Marker: spec.Owner.Marker()}), nil
}

// verifyInputs re-checks spec's baseline and, with direct kernel boot, its kernel against the
// store right before a domain is defined on them: the stored copies are what QEMU reads.
func (d *Driver) verifyInputs(ctx context.Context, spec substrate.NodeSpec) error {
	defer d.step(spec.Owner.Address, "verify")()
	if err := d.VerifyArtifact(ctx, *spec.Artifact); err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	if spec.Kernel != nil {
		if err := d.VerifyArtifact(ctx, *spec.Kernel); err != nil {
			return fmt.Errorf("kernel: %w", err)
		}
	}
	return nil
}

// createOverlay makes overlay a new qcow2 file backed by backing (the stored baseline or the
// node's snapshot disk; qemu-img never writes to the backing file). A leftover overlay of an
// interrupted create (no domain refers to it yet: the caller looked) is replaced, and so is its
// start record (the generation never ran). The owner record beside it is written first.
func (d *Driver) createOverlay(ctx context.Context, o substrate.Owner, backing, format, overlay string) error {
	defer d.step(o.Address, "overlay")()
	dir := filepath.Dir(overlay)
	d.dirs.Lock() // not removed as empty between its creation and the owner record
	err := os.MkdirAll(dir, 0o755)
	if err == nil {
		err = os.Chmod(dir, 0o755) // QEMU (libvirt-qemu) must traverse it
	}
	if err != nil {
		d.dirs.Unlock()
		return fmt.Errorf("overlay dir: %w", err)
	}
	err = durable.WriteFile(ownerRecord(overlay), []byte(o.Marker()+"\n"), 0o644)
	d.dirs.Unlock()
	if err != nil {
		return fmt.Errorf("overlay owner record: %w", err)
	}
	for _, p := range []string{overlay, startRecord(overlay)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove leftover %s: %w", p, err)
		}
	}
	_, err = d.run.Run(ctx, argv.Cmd{Argv: []string{d.qemuImg, "create", "-q", "-f", "qcow2", "-F", format,
		"-b", backing, overlay}, Timeout: time.Minute})
	if err != nil {
		return fmt.Errorf("overlay %s on %s: %w", overlay, backing, err)
	}
	return durable.SyncDir(dir)
}

// removeDirIfEmpty removes a topology's overlay directory once nothing is left in it but the
// temporary files of durable writes a killed process left (never data: their renames did not
// happen).
func (d *Driver) removeDirIfEmpty(topology string) error {
	d.dirs.Lock()
	defer d.dirs.Unlock()
	dir := d.overlayDir(topology)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !isRecordTemp(e.Name()) {
			return nil
		}
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove leftover temporary file: %w", err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove empty overlay directory: %w", err)
	}
	return nil
}

// isRecordTemp reports whether name is the temporary file of a durable write of one of the
// driver's own records (owner or start record) — the only files this driver writes that way in
// an overlay directory. Anything else (an overlay, a console log, a stranger's file) keeps the
// directory.
func isRecordTemp(name string) bool {
	target, ok := durable.TempTarget(name)
	return ok && (strings.HasSuffix(target, ".owner") || strings.HasSuffix(target, ".start"))
}

func (d *Driver) removeOverlay(overlay string) error {
	for _, p := range []string{overlay, strings.TrimSuffix(overlay, ".qcow2") + ".console.log", startRecord(overlay), ownerRecord(overlay)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove %s: %w", p, err)
		}
	}
	return nil
}

// StartNode starts the domain (a no-op when it runs) and waits until its guest agent answers
// guest-ping (unless Options.ReadyTimeout is negative).
func (d *Driver) StartNode(ctx context.Context, h substrate.Handle, spec substrate.NodeSpec) error {
	what := "node " + spec.Owner.Address + ": start"
	c, dom, _, err := d.lookupOwned(ctx, what, h, spec.Owner)
	if err != nil {
		return err
	}
	return d.ensureRunning(ctx, what, c, dom)
}

// ensureRunning starts a stopped domain and waits for its agent. A generation's first start
// restores the node's snapshot when its overlay was built on one (falling back to a cold boot),
// and a first cold start on the baseline takes that snapshot once the agent answers. The start
// record says which path ran.
func (d *Driver) ensureRunning(ctx context.Context, what string, c conn, dom golibvirt.Domain) error {
	up, _, err := running(c, dom)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if up {
		return d.ready(ctx, what, c, dom, nil)
	}
	x, err := domainXML(c, dom)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	m, _ := findMeta(x)
	o, owned := m.owner()
	first := false
	if owned && m.Overlay != "" {
		_, started, err := durable.ReadFileIfExists(startRecord(m.Overlay))
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		first = !started
	}
	if first {
		// Recorded before the start: a crash after a restore must not make a later start restore
		// the snapshot's memory again onto a disk the guest has written since.
		if err := durable.WriteFile(startRecord(m.Overlay), []byte("starting\n"), 0o644); err != nil {
			return fmt.Errorf("%s: start record: %w", what, err)
		}
	}
	how := "cold"
	switch {
	case first && m.Snapshot != "":
		if rerr := d.restoreSnapshot(c, x, o, m); rerr != nil {
			how = "cold: snapshot restore failed: " + rerr.Error()
		} else {
			how = "snapshot"
		}
	case m.Cold != "":
		how = "cold: " + m.Cold
	}
	if how != "snapshot" {
		done := d.step(o.Address, "start")
		if err := c.DomainCreate(dom); err != nil {
			return apiErr(fmt.Sprintf("%s: domain %s", what, dom.Name), err)
		}
		done()
	}
	done := d.step(o.Address, "agent")
	if err := d.ready(ctx, what, c, dom, d.step(o.Address, "agent connected")); err != nil {
		return err
	}
	done()
	if !first {
		return nil
	}
	if err := durable.WriteFile(startRecord(m.Overlay), []byte(how+"\n"), 0o644); err != nil {
		return fmt.Errorf("%s: start record: %w", what, err)
	}
	if m.Snapshot != "" || !d.snapshots || d.readyTimeout < 0 {
		return nil
	}
	done = d.step(o.Address, "take snapshot")
	err = d.takeSnapshot(ctx, what, c, dom, o, m)
	done()
	if err != nil {
		// The node runs (takeSnapshot brings it back); only the fast path is lost. Say so where
		// the observation shows it.
		how += "; no snapshot taken: " + err.Error()
		if werr := durable.WriteFile(startRecord(m.Overlay), []byte(how+"\n"), 0o644); werr != nil {
			return fmt.Errorf("%s: start record: %w", what, werr)
		}
		if up, _, rerr := running(c, dom); rerr != nil || !up {
			return fmt.Errorf("%s: snapshot: %w", what, err)
		}
	}
	return nil
}

// ready waits for the guest agent, bounded by ReadyTimeout; connected, when set, is called when
// libvirt reports the agent connected.
func (d *Driver) ready(ctx context.Context, what string, c conn, dom golibvirt.Domain, connected func()) error {
	if d.readyTimeout < 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, d.readyTimeout)
	defer cancel()
	if err := waitAgent(wctx, c, dom, d.agentPoll, connected); err != nil {
		return fmt.Errorf("%s: domain %s: %w", what, dom.Name, err)
	}
	return nil
}

// ObserveNode reports present (running, metadata proves owner), degraded (defined but not
// running), drifted (metadata of another owner, or the domain replaced behind our back), absent
// (no such domain and no replacement) or unknown with an error wrapping ErrUnavailable.
func (d *Driver) ObserveNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) (substrate.Observation, error) {
	what := "observe node " + owner.Address
	c, err := d.conn(ctx)
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
		return unknown(h.ExternalID, err), err
	}
	u, err := parseUUID(h.ExternalID)
	if err != nil {
		return unknown(h.ExternalID, err), fmt.Errorf("%s: %w", what, err)
	}
	dom, err := c.DomainLookupByUUID(u)
	if err != nil {
		err = apiErr(fmt.Sprintf("%s: domain %s", what, h.ExternalID), err)
		if !errors.Is(err, driver.ErrNotFound) {
			return unknown(h.ExternalID, err), err
		}
		doms, lerr := d.ownedDomains(ctx, c, owner.Topology)
		if lerr != nil {
			return unknown(h.ExternalID, lerr), lerr
		}
		for _, od := range doms {
			if od.owner.SameResource(owner) {
				o := od.owner
				return substrate.Observation{Status: substrate.Drifted, ExternalID: formatUUID(od.dom.UUID), Owner: &o, At: observedAt(),
					Reason: fmt.Sprintf("domain %s is gone; domain %s carries this resource's metadata (replaced behind our back)", h.ExternalID, od.dom.Name)}, nil
			}
		}
		return substrate.Observation{Status: substrate.Absent, ExternalID: h.ExternalID, At: observedAt(),
			Reason: fmt.Sprintf("domain %s does not exist", h.ExternalID)}, nil
	}
	x, err := domainXML(c, dom)
	if err != nil {
		return unknown(h.ExternalID, err), fmt.Errorf("%s: %w", what, err)
	}
	up, state, err := running(c, dom)
	if err != nil {
		return unknown(h.ExternalID, err), fmt.Errorf("%s: %w", what, err)
	}
	obs := substrate.Observation{ExternalID: h.ExternalID, At: observedAt(), Attributes: map[string]string{
		"name": dom.Name, "state": state, "domain_type": x.Type}}
	if m, ok := findMeta(x); ok {
		if o, ok := m.owner(); ok {
			obs.Owner = &o
		}
		obs.Attributes["overlay"] = m.Overlay
		if b, ok, _ := durable.ReadFileIfExists(startRecord(m.Overlay)); ok {
			obs.Attributes["started_from"] = strings.TrimSpace(string(b))
		}
	}
	if _, err := checkOwned("domain "+dom.Name, x, owner); err != nil {
		obs.Status, obs.Reason = substrate.Drifted, err.Error()
		return obs, nil
	}
	if !up {
		obs.Status, obs.Reason = substrate.Degraded, "domain is "+state
		return obs, nil
	}
	obs.Status = substrate.Present
	if from := obs.Attributes["started_from"]; from != "" {
		obs.Reason = "started from " + from // state keeps the reason: `sysbox state show` says which reset path ran
	}
	return obs, nil
}

// ownedDomain is a domain carrying complete sysbox metadata.
type ownedDomain struct {
	dom     golibvirt.Domain
	owner   substrate.Owner
	overlay string
	snapGen uint64 // the generation whose snapshot its overlay sits on; 0: none
}

// ownedDomains lists the domains (running or not) whose metadata names topology.
func (d *Driver) ownedDomains(ctx context.Context, c conn, topology string) ([]ownedDomain, error) {
	doms, _, err := c.ConnectListAllDomains(1, 0)
	if err != nil {
		return nil, apiErr("list domains of topology "+topology, err)
	}
	var out []ownedDomain
	for _, dom := range doms {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		x, err := domainXML(c, dom)
		if errors.Is(err, driver.ErrNotFound) {
			continue // undefined meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list domains of topology %s: %w", topology, err)
		}
		m, ok := findMeta(x)
		if !ok {
			continue
		}
		if o, ok := m.owner(); ok && o.Topology == topology {
			gen, _ := strconv.ParseUint(m.SnapGen, 10, 64)
			out = append(out, ownedDomain{dom: dom, owner: o, overlay: m.Overlay, snapGen: gen})
		}
	}
	return out, nil
}

// StopNode powers the domain off (a hard stop: guests under test need not handle ACPI).
func (d *Driver) StopNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	what := "node " + owner.Address + ": stop"
	c, dom, _, err := d.lookupOwned(ctx, what, h, owner)
	if err != nil {
		return err
	}
	up, _, err := running(c, dom)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !up {
		return nil
	}
	if err := c.DomainDestroy(dom); err != nil {
		return apiErr(fmt.Sprintf("%s: domain %s", what, dom.Name), err)
	}
	return nil
}

// undefineFlags remove everything libvirt keeps beside a definition.
const undefineFlags = golibvirt.DomainUndefineManagedSave | golibvirt.DomainUndefineSnapshotsMetadata |
	golibvirt.DomainUndefineNvram | golibvirt.DomainUndefineCheckpointsMetadata

// DeleteNode powers off and undefines the domain (NVRAM, managed save and snapshot metadata
// included) after checking its metadata, then deletes its taps and overlay. A domain that is
// already gone is not an error; its taps and overlay are still removed.
func (d *Driver) DeleteNode(ctx context.Context, h substrate.Handle, owner substrate.Owner) error {
	what := "node " + owner.Address + ": delete"
	c, dom, _, err := d.lookupOwned(ctx, what, h, owner)
	switch {
	case errors.Is(err, driver.ErrNotFound):
	case err != nil:
		return err
	default:
		if up, _, err := running(c, dom); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		} else if up {
			if err := c.DomainDestroy(dom); err != nil && !golibvirt.IsNotFound(err) {
				return apiErr(fmt.Sprintf("%s: domain %s: power off", what, dom.Name), err)
			}
		}
		if err := c.DomainUndefineFlags(dom, undefineFlags); err != nil && !golibvirt.IsNotFound(err) {
			return apiErr(fmt.Sprintf("%s: domain %s: undefine", what, dom.Name), err)
		}
	}
	if err := deleteTapsOf(ctx, owner); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := d.removeOverlay(d.overlayPath(owner)); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	// A snapshot outlives the generation that took it (later ones sit on its disk); what no
	// remaining domain of the node sits on goes, but the newest, and everything with the
	// node's last domain.
	if c == nil {
		if c, err = d.conn(ctx); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
	doms, err := d.ownedDomains(ctx, c, owner.Topology)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	var left []ownedDomain
	for _, od := range doms {
		if od.owner.SameResource(owner) {
			left = append(left, od)
		}
	}
	if err := d.pruneSnapshots(owner, left); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(left) > 0 {
		return nil
	}
	if err := d.removeDirIfEmpty(owner.Topology); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// Exec runs req.Argv in the guest through the guest agent (guest-exec, guest-exec-status).
func (d *Driver) Exec(ctx context.Context, node substrate.Handle, req substrate.ExecRequest) (substrate.ExecResult, error) {
	what := "exec in domain " + node.ExternalID
	if len(req.Argv) == 0 {
		return substrate.ExecResult{}, fmt.Errorf("%s: empty argv", what)
	}
	if req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout)
		defer cancel()
	}
	c, dom, err := d.lookup(ctx, node)
	if err != nil {
		return substrate.ExecResult{}, fmt.Errorf("%s: %w", what, err)
	}
	res, err := guestvm.Exec(ctx, agentClient(c, dom), req)
	if err != nil {
		return res, fmt.Errorf("%s (%s): %s: %w", what, dom.Name, req.Argv[0], err)
	}
	return res, nil
}

// lookup finds a node's domain by UUID without an ownership check (exec and guest network
// configuration change nothing libvirt holds).
func (d *Driver) lookup(ctx context.Context, node substrate.Handle) (conn, golibvirt.Domain, error) {
	c, err := d.conn(ctx)
	if err != nil {
		return nil, golibvirt.Domain{}, err
	}
	u, err := parseUUID(node.ExternalID)
	if err != nil {
		return nil, golibvirt.Domain{}, err
	}
	dom, err := c.DomainLookupByUUID(u)
	if err != nil {
		return nil, golibvirt.Domain{}, apiErr("domain "+node.ExternalID, err)
	}
	return c, dom, nil
}

// NewGeneration re-verifies the baseline, quiesces the prior generation's taps (down and off
// their bridges, so the replacement can take the same MACs and addresses while the prior domain
// keeps running until the executor deletes it) and defines the replacement domain on a new
// overlay of the same baseline.
func (d *Driver) NewGeneration(ctx context.Context, prior substrate.Handle, priorOwner substrate.Owner, spec substrate.NodeSpec) (substrate.Handle, error) {
	what := "reset node " + spec.Owner.Address
	if !spec.Owner.SameResource(priorOwner) || spec.Owner.Generation <= priorOwner.Generation {
		return substrate.Handle{}, fmt.Errorf("%s: new owner %+v is not a later generation of %+v", what, spec.Owner, priorOwner)
	}
	if spec.Artifact == nil {
		return substrate.Handle{}, fmt.Errorf("%s: no baseline artifact", what)
	}
	// Verified before the prior generation is touched: a baseline that fails leaves it as it was.
	if err := d.verifyInputs(ctx, spec); err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
	}
	done := d.step(spec.Owner.Address, "quiesce prior")
	_, _, _, err := d.lookupOwned(ctx, what+": prior generation", prior, priorOwner)
	switch {
	case errors.Is(err, driver.ErrNotFound):
	case err != nil:
		return substrate.Handle{}, err
	}
	taps, err := linuxnet.HostLinksOf(priorOwner)
	if err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
	}
	for _, t := range taps {
		if err := linuxnet.QuiesceVeth(ctx, t, priorOwner); err != nil { // any marked link: down, off its bridge
			return substrate.Handle{}, fmt.Errorf("%s: quiesce prior generation's tap %s: %w", what, t, err)
		}
	}
	done()
	if !d.snapshots {
		return d.createNode(ctx, spec, nil, "snapshots are off", true)
	}
	done = d.step(spec.Owner.Address, "check snapshot")
	snap, err := d.usableSnapshot(spec.Owner, spec)
	done()
	if err != nil {
		return d.createNode(ctx, spec, nil, "no usable snapshot: "+err.Error(), true)
	}
	return d.createNode(ctx, spec, &snap, "", true)
}

// Residue lists the domains, taps and overlays carrying topology's markers.
func (d *Driver) Residue(ctx context.Context, topology string) ([]substrate.Object, error) {
	c, err := d.conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: %w", topology, err)
	}
	doms, err := d.ownedDomains(ctx, c, topology)
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: %w", topology, err)
	}
	var out []substrate.Object
	for _, od := range doms {
		out = append(out, substrate.Object{Kind: "domain", ExternalID: od.dom.Name + " " + formatUUID(od.dom.UUID), Owner: od.owner})
	}
	taps, err := tapResidue(topology)
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: %w", topology, err)
	}
	out = append(out, taps...)
	files, err := d.overlayResidue(topology)
	if err != nil {
		return nil, fmt.Errorf("residue of topology %s: %w", topology, err)
	}
	return append(out, files...), nil
}

// overlayResidue lists the overlays (by their owner records) left in topology's directory. A
// record that cannot be read is an error: it may be one of topology's.
func (d *Driver) overlayResidue(topology string) ([]substrate.Object, error) {
	dir := d.overlayDir(topology)
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []substrate.Object
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".owner") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, ok, err := durable.ReadFileIfExists(p)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		o, err := substrate.ParseMarker(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("overlay owner record %s: %w", p, err)
		}
		if o.Topology == topology {
			kind := "overlay"
			if strings.Contains(e.Name(), "-snap-g") {
				kind = "snapshot"
			}
			out = append(out, substrate.Object{Kind: kind, ExternalID: strings.TrimSuffix(p, ".owner") + ".qcow2", Owner: o})
		}
	}
	return out, nil
}
