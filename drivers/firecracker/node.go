package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/durable"
	"zyvor.dev/sysbox/pkg/substrate"
)

// CreateNode makes the node generation's object: its directory with the durable record (owner
// marker first, so a crash leaves something this owner can adopt), a private copy of the rootfs
// baseline, and a VMM process configured before boot (machine-config, boot-source, root drive).
// The guest is not started. A retried create of the same owner adopts what it finds.
func (d *Driver) CreateNode(ctx context.Context, spec substrate.NodeSpec) (substrate.Handle, error) {
	return d.createNode(ctx, spec, nil)
}

// createNode creates spec's generation; with prior (a reset), from prior's snapshot when it
// has a fitting one: then the process stays unconfigured until StartNode loads the snapshot.
func (d *Driver) createNode(ctx context.Context, spec substrate.NodeSpec, prior *nodeRecord) (substrate.Handle, error) {
	linuxnet.PrepareStateDir(d.stateDir) // before the first record below the runtime root
	o := spec.Owner
	if !o.Complete() {
		return substrate.Handle{}, fmt.Errorf("firecracker node: incomplete owner %+v: %w", o, driver.ErrInvalid)
	}
	name := NodeName(o)
	what := fmt.Sprintf("firecracker node %s (%s)", o.Address, name)
	rootfs, kernel := artifactPath(spec.Artifact), artifactPath(spec.Kernel)
	if rootfs == "" {
		return substrate.Handle{}, fmt.Errorf("%s: needs a rootfs artifact resolved to an absolute path: %w", what, driver.ErrInvalid)
	}
	if kernel == "" {
		return substrate.Handle{}, fmt.Errorf("%s: needs a kernel artifact (an uncompressed ELF vmlinux) resolved to an absolute path: %w", what, driver.ErrInvalid)
	}
	m := MachineConfig{VCPUCount: spec.CPUs, MemSizeMiB: spec.MemoryMB}
	if m.VCPUCount == 0 {
		m.VCPUCount = defaultVCPUs
	}
	if m.MemSizeMiB == 0 {
		m.MemSizeMiB = defaultMemMiB
	}
	if err := m.validate(); err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dir := d.nodeDir(name)
	r, err := d.owned(name, o)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		if err := os.MkdirAll(d.stateDir, 0o755); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: state directory: %v: %w", what, err, driver.ErrUnavailable)
		}
		r = nodeRecord{Name: name, Marker: o.Marker(), Generation: o.Generation,
			Kernel: kernel, BootArgs: defaultBootArgs,
			Baseline: rootfs, BaselineDigest: spec.Artifact.Digest, VCPUs: m.VCPUCount, MemMiB: m.MemSizeMiB}
		if err := d.createLayout(&r); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
		}
		if prior != nil && d.snapshots {
			d.adoptSnapshot(*prior, &r)
		}
	case err != nil:
		return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
	case isOurVMM(r.PID, r.StartTime, r.Socket):
		// A retried create finds the process of the create that was interrupted. Not started
		// does not mean configured: a kill between spawning and configuring it leaves a VMM that
		// refuses to boot ("Cannot start microvm without kernel configuration"). Rather than read
		// its pre-boot configuration back and compare it, it is replaced by a fresh process,
		// configured below (a retried create is rare; a spawn costs little).
		if err := killVMM(ctx, name, r); err != nil {
			return substrate.Handle{}, err
		}
	}
	if r.Jail != nil {
		// Again on a retried create: nothing is written into a jail not proven ours.
		if err := d.prepareJail(r); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	if r.Restore != nil {
		// A snapshot restores into a fresh process that got no pre-boot configuration.
		d.restoreDisk(r)
		if err := d.spawnRecorded(ctx, &r); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
		}
		return nodeHandle(r, dir), nil
	}
	if _, err := os.Stat(r.Rootfs); errors.Is(err, os.ErrNotExist) {
		if err := copyRootfs(rootfs, r.Rootfs, spec.Artifact.Digest, r.owner()); err != nil {
			return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
		}
	}
	if err := d.configure(ctx, &r); err != nil {
		return substrate.Handle{}, fmt.Errorf("%s: %w", what, err)
	}
	return nodeHandle(r, dir), nil
}

// createLayout gives the new record r its file layout (jailed or not) and makes its node
// directory with the record inside, then its jail directory: after the node directory, so a
// jail directory always has a record naming it.
func (d *Driver) createLayout(r *nodeRecord) error {
	jail, err := d.newJail()
	if err != nil {
		return err
	}
	r.Jail = jail
	r.Socket, r.Rootfs = filepath.Join(d.filesDir(*r), apiSock), filepath.Join(d.filesDir(*r), rootfsFile)
	if err := d.createDir(*r); err != nil {
		return err
	}
	if r.Jail == nil {
		return nil
	}
	return d.prepareJail(*r)
}

// createDir makes r's node directory with its record already inside: it is built under a
// temporary name and renamed into place, so a crash never leaves a node directory without the
// record that proves whose it is (such a directory is refused as not ours, for ever).
func (d *Driver) createDir(r nodeRecord) error {
	// Temporary directories of this node left by a killed run hold nothing but a record.
	stale, _ := filepath.Glob(filepath.Join(d.stateDir, ".tmp-"+r.Name+"-*"))
	for _, p := range stale {
		_ = os.RemoveAll(p)
	}
	tmp, err := os.MkdirTemp(d.stateDir, ".tmp-"+r.Name+"-")
	if err != nil {
		return err
	}
	b, err := durable.EncodeRecord(recordKind, 1, r)
	if err == nil {
		err = durable.WriteFile(filepath.Join(tmp, recordFile), b, 0o600)
	}
	if err == nil {
		err = os.Rename(tmp, d.nodeDir(r.Name))
	}
	if err == nil {
		err = syncDir(d.stateDir)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
	}
	return err
}

// artifactPath is where a resolved artifact lives: its Ref (what ResolveArtifact set, the
// absolute path) or else an absolute Source; "" when neither is.
func artifactPath(id *substrate.ArtifactIdentity) string {
	switch {
	case id == nil:
		return ""
	case filepath.IsAbs(id.Ref):
		return id.Ref
	case filepath.IsAbs(id.Source):
		return id.Source
	}
	return ""
}

// configure starts a fresh VMM process for r and sends its pre-boot configuration (machine,
// kernel, root drive, and the network interfaces already attached), recording the process
// identity.
func (d *Driver) configure(ctx context.Context, r *nodeRecord) error {
	if err := d.spawnRecorded(ctx, r); err != nil {
		return err
	}
	kernel := r.Kernel
	if r.Jail != nil {
		kernel = "/" + kernelFile // placed by prepareJail
	}
	c, err := NewClient(r.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	steps := []func() error{
		func() error { return c.PutMachineConfig(ctx, MachineConfig{VCPUCount: r.VCPUs, MemSizeMiB: r.MemMiB}) },
		func() error {
			return c.PutBootSource(ctx, BootSource{KernelImagePath: kernel, BootArgs: r.BootArgs})
		},
		func() error {
			return c.PutDrive(ctx, Drive{DriveID: rootDriveID, PathOnHost: d.vmmPath(*r, r.Rootfs), IsRootDevice: true})
		},
	}
	for _, n := range sortedNICs(r.NICs) {
		steps = append(steps, func() error {
			return c.PutNetworkInterface(ctx, NetworkInterface{IfaceID: n.IfaceID, HostDevName: n.TAP, GuestMAC: n.MAC})
		})
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// spawnRecorded starts a fresh VMM process for r and records its identity.
func (d *Driver) spawnRecorded(ctx context.Context, r *nodeRecord) error {
	if r.Jail != nil {
		// Again on every spawn: a jail left without its kernel or link (e.g. a host reboot
		// cleared a tmpfs chroot base) is rebuilt.
		if err := d.prepareJail(*r); err != nil {
			return err
		}
	}
	pid, start, err := d.spawn(ctx, *r)
	if err != nil {
		return err
	}
	r.PID, r.StartTime = pid, start
	if err := d.writeRecord(*r); err != nil {
		_ = killVMM(ctx, r.Name, *r)
		return err
	}
	return nil
}

func (d *Driver) describe(ctx context.Context, r nodeRecord) (InstanceInfo, error) {
	c, err := NewClient(r.Socket)
	if err != nil {
		return InstanceInfo{}, err
	}
	defer c.Close()
	return c.Describe(ctx)
}

// StartNode boots the guest (vsock device, then InstanceStart; a Paused guest is resumed), waits
// for its agent to answer on vsock and applies the recorded guest network. A node whose VMM
// process is gone (stopped, host rebooted) gets a fresh process configured from its record
// first.
func (d *Driver) StartNode(ctx context.Context, h substrate.Handle, spec substrate.NodeSpec) error {
	r, cold, err := d.boot(ctx, h, spec.Owner)
	if err != nil {
		return err
	}
	// Unlocked: other nodes go on while this guest boots.
	what := "firecracker node " + r.Name
	if err := d.waitAgent(ctx, r); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if cold && d.snapshots && r.Snapshot == nil {
		// The booted baseline, before its network is configured: what the next reset restores.
		if err := d.takeSnapshot(ctx, &r); err != nil {
			return err
		}
	}
	if err := d.applyNetwork(ctx, r, r.Network); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// boot gets the node's guest running (restored from its snapshot, else cold) and returns its
// record; cold reports an InstanceStart.
func (d *Driver) boot(ctx context.Context, h substrate.Handle, o substrate.Owner) (r nodeRecord, cold bool, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err = d.owned(h.ExternalID, o)
	if err != nil {
		return r, false, err
	}
	what := "firecracker node " + r.Name
	if !isOurVMM(r.PID, r.StartTime, r.Socket) {
		if r.Restore != nil {
			err = d.spawnRecorded(ctx, &r)
		} else {
			err = d.configure(ctx, &r)
		}
		if err != nil {
			return r, false, fmt.Errorf("%s: %w", what, err)
		}
	}
	c, err := NewClient(r.Socket)
	if err != nil {
		return r, false, err
	}
	defer c.Close()
	info, err := c.Describe(ctx)
	if err != nil {
		return r, false, fmt.Errorf("%s: %w", what, err)
	}
	switch info.State {
	case StateRunning:
		return r, false, nil
	case StatePaused:
		return r, false, c.PatchVM(ctx, VMResumed)
	}
	if r.Restore != nil {
		if err := d.restore(ctx, c, &r); err == nil {
			return r, false, nil
		}
		// The cold path: a fresh process from the baseline.
		if err := d.coldAfterRestore(ctx, &r); err != nil {
			return r, false, fmt.Errorf("%s: boot cold after a failed snapshot restore: %w", what, err)
		}
		c.Close()
		if c, err = NewClient(r.Socket); err != nil {
			return r, false, err
		}
		defer c.Close()
	}
	uds := filepath.Join(d.filesDir(r), vsockFile)
	_ = os.Remove(uds) // a stale socket of an earlier process of this node
	if err := c.PutVsock(ctx, Vsock{GuestCID: guestCID, UDSPath: d.vmmPath(r, uds)}); err != nil {
		return r, false, fmt.Errorf("%s: %w", what, err)
	}
	if err := c.InstanceStart(ctx); err != nil {
		return r, false, fmt.Errorf("%s: %w", what, err)
	}
	return r, true, nil
}

// ObserveNode reports the node: Absent without its directory; Unknown when the state directory
// or the API cannot be read; Drifted when the record is not this owner's; Degraded when the VMM
// process is gone; otherwise Present with the VMM's state as an attribute.
func (d *Driver) ObserveNode(ctx context.Context, h substrate.Handle, o substrate.Owner) (substrate.Observation, error) {
	now := time.Now().UTC()
	obs := substrate.Observation{ExternalID: h.ExternalID, At: now}
	r, err := d.lookup(h.ExternalID)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		obs.Status, obs.Reason = substrate.Absent, "no node directory"
		return obs, nil
	case errors.Is(err, driver.ErrNotOwned):
		obs.Status, obs.Reason = substrate.Drifted, err.Error()
		return obs, nil
	case err != nil:
		obs.Status, obs.Reason = substrate.Unknown, err.Error()
		return obs, err
	}
	if found, perr := substrate.ParseMarker(r.Marker); perr == nil {
		obs.Owner = &found
	}
	if r.Marker != o.Marker() || !o.Complete() {
		obs.Status, obs.Reason = substrate.Drifted, "the node's record carries another owner's marker"
		return obs, nil
	}
	if !isOurVMM(r.PID, r.StartTime, r.Socket) {
		obs.Status, obs.Reason = substrate.Degraded, "the VMM process is not running"
		return obs, nil
	}
	info, err := d.describe(ctx, r)
	if err != nil {
		obs.Status, obs.Reason = substrate.Unknown, err.Error()
		return obs, fmt.Errorf("firecracker node %s: %w", r.Name, err)
	}
	obs.Status = substrate.Present
	obs.Attributes = map[string]string{"state": string(info.State), "pid": strconv.Itoa(r.PID)}
	return obs, nil
}

// StopNode ends the node's VMM process (after proving ownership and that the process is still
// the recorded one). The directory, disk copy and TAPs stay.
func (d *Driver) StopNode(ctx context.Context, h substrate.Handle, o substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.owned(h.ExternalID, o)
	if err != nil {
		return err
	}
	return killVMM(ctx, r.Name, r)
}

// DeleteNode removes the node generation: its VMM process, its TAPs (each only when it carries
// the node's marker) and its directory.
func (d *Driver) DeleteNode(ctx context.Context, h substrate.Handle, o substrate.Owner) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, err := d.owned(h.ExternalID, o)
	if err != nil {
		return err
	}
	if err := killVMM(ctx, r.Name, r); err != nil {
		return err
	}
	if err := killStrays(ctx, r.Name, r.Socket); err != nil {
		return err
	}
	for _, tap := range r.taps() {
		if err := deleteTAP(tap, o, r.pending(tap)); err != nil {
			return fmt.Errorf("firecracker node %s: %w", r.Name, err)
		}
	}
	// Before the node directory, so a crash in between leaves the record naming the jail.
	if err := removeJail(r); err != nil {
		return fmt.Errorf("firecracker node %s: %w", r.Name, err)
	}
	if err := os.RemoveAll(d.nodeDir(r.Name)); err != nil {
		return fmt.Errorf("firecracker node %s: %w", r.Name, err)
	}
	return syncDir(d.stateDir)
}

// NewGeneration quiesces prior (its TAPs go down, so its guest stops answering on the bridge)
// and creates the next generation from the same baseline: a new directory, disk copy and VMM
// process; Attach gives it new TAPs with the same MACs.
func (d *Driver) NewGeneration(ctx context.Context, prior substrate.Handle, priorOwner substrate.Owner, spec substrate.NodeSpec) (substrate.Handle, error) {
	if !spec.Owner.SameResource(priorOwner) || spec.Owner.Generation <= priorOwner.Generation {
		return substrate.Handle{}, fmt.Errorf("firecracker node %s: new generation %d must follow %d of the same resource: %w",
			priorOwner.Address, spec.Owner.Generation, priorOwner.Generation, driver.ErrInvalid)
	}
	d.mu.Lock()
	r, err := d.owned(prior.ExternalID, priorOwner)
	d.mu.Unlock()
	if err != nil {
		return substrate.Handle{}, err
	}
	for _, tap := range r.taps() {
		if err := setTAPDown(tap, priorOwner); err != nil {
			return substrate.Handle{}, fmt.Errorf("firecracker node %s: quiesce: %w", r.Name, err)
		}
	}
	return d.createNode(ctx, spec, &r)
}
