package firecracker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
)

// The reset fast path. A generation that booted cold takes, once its agent first answers and
// before its network is configured, a Full snapshot of its booted baseline (PATCH /vm Paused,
// PUT /snapshot/create, a sparse copy of its disk while paused, PATCH /vm Resumed) into
// DIR/snapshot. NewGeneration moves that snapshot into the next generation (DIR/restore), whose
// fresh process, instead of the pre-boot configuration, gets PUT /snapshot/load with
// network_overrides (its own TAPs) and vsock_override (its own uds_path), PATCH /drives/rootfs
// onto its own disk copy, and PATCH /vm Resumed. The snapshot files are deleted as soon as the
// load succeeded, so no snapshot is ever resumed twice (Firecracker's documentation calls that
// insecure); a restored generation takes no snapshot of its own, so the reset after it boots
// cold and takes a fresh one. Whenever the fast path cannot be taken or fails, the node boots
// cold from the baseline (the cold path).

// Files of a snapshot directory.
const (
	snapshotDir  = "snapshot"
	restoreDir   = "restore"
	snapVMFile   = "vm.snap"
	snapMemFile  = "mem"
	snapDiskFile = "rootfs.img"
)

// snapshotMeta describes a snapshot: what it was taken of, so a generation restores it only
// onto the same kernel, baseline, machine and interfaces.
type snapshotMeta struct {
	Kernel         string   `json:"kernel"`
	BootArgs       string   `json:"boot_args"`
	Baseline       string   `json:"baseline"`
	BaselineDigest string   `json:"baseline_digest"`
	VCPUs          int      `json:"vcpus"`
	MemMiB         int      `json:"mem_mib"`
	Ifaces         []string `json:"ifaces"` // iface_ids, sorted
	// Jail is the jailed layout's key ("" unjailed): the files belong to its uid and chroot base.
	Jail string `json:"jail,omitempty"`
}

func metaOf(r nodeRecord) snapshotMeta {
	m := snapshotMeta{Kernel: r.Kernel, BootArgs: r.BootArgs, Baseline: r.Baseline, BaselineDigest: r.BaselineDigest,
		VCPUs: r.VCPUs, MemMiB: r.MemMiB, Ifaces: []string{}, Jail: r.Jail.key()}
	for _, n := range r.NICs {
		m.Ifaces = append(m.Ifaces, n.IfaceID)
	}
	sort.Strings(m.Ifaces)
	return m
}

// fits reports whether a snapshot described by m may boot the generation r describes.
func (m snapshotMeta) fits(r nodeRecord) bool {
	o := metaOf(r)
	return m.Kernel == o.Kernel && m.BootArgs == o.BootArgs && m.Baseline == o.Baseline &&
		m.BaselineDigest == o.BaselineDigest && m.BaselineDigest != "" && m.VCPUs == o.VCPUs && m.MemMiB == o.MemMiB &&
		m.Jail == o.Jail
}

func snapshotComplete(dir string) bool {
	for _, f := range []string{snapVMFile, snapMemFile, snapDiskFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// takeSnapshot snapshots r's running guest into DIR/snapshot and records it. The guest is
// resumed whatever happens; only a failed resume is an error the caller must see (a missing
// snapshot only means the next reset boots cold).
func (d *Driver) takeSnapshot(ctx context.Context, r *nodeRecord) (resumeErr error) {
	dir := filepath.Join(d.filesDir(*r), snapshotDir)
	if err := os.RemoveAll(dir); err != nil {
		return nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil
	}
	if err := r.owner().chown(dir); err != nil { // the jailed VMM writes the snapshot files
		return nil
	}
	c, err := NewClient(r.Socket)
	if err != nil {
		return nil
	}
	defer c.Close()
	if err := c.PatchVM(ctx, VMPaused); err != nil {
		return nil
	}
	meta := metaOf(*r)
	err = c.CreateSnapshot(ctx, SnapshotCreate{SnapshotPath: d.vmmPath(*r, filepath.Join(dir, snapVMFile)),
		MemFilePath: d.vmmPath(*r, filepath.Join(dir, snapMemFile)), SnapshotType: "Full"})
	if err == nil {
		// The disk as the snapshot's memory knows it: copied while the vCPUs are stopped.
		err = copyRootfs(r.Rootfs, filepath.Join(dir, snapDiskFile), "", r.owner())
	}
	if rerr := c.PatchVM(ctx, VMResumed); rerr != nil {
		return fmt.Errorf("firecracker node %s: resume after snapshot: %w", r.Name, rerr)
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	cur, err := d.readRecord(r.Name)
	if err != nil || cur.PID != r.PID {
		return nil
	}
	cur.Snapshot = &meta
	if err := d.writeRecord(cur); err == nil {
		*r = cur
	}
	return nil
}

// adoptSnapshot moves prior's snapshot into r's directory as the one r restores from, and
// makes the snapshot's disk r's disk. r records the restore before its disk comes from the
// snapshot, so a crash never leaves a cold-booting generation on a used disk. Callers hold d.mu.
func (d *Driver) adoptSnapshot(prior nodeRecord, r *nodeRecord) {
	if prior.Snapshot == nil || !prior.Snapshot.fits(*r) {
		return
	}
	meta := *prior.Snapshot
	from := filepath.Join(d.filesDir(prior), snapshotDir)
	to := filepath.Join(d.filesDir(*r), restoreDir)
	if !snapshotComplete(from) {
		return
	}
	_ = os.RemoveAll(to)
	if err := os.Rename(from, to); err != nil {
		return
	}
	// The prior generation no longer has it: nobody may restore it a second time.
	prior.Snapshot = nil
	if err := d.writeRecord(prior); err != nil {
		return
	}
	r.Restore = &meta
	if err := d.writeRecord(*r); err != nil {
		r.Restore = nil
		return
	}
	d.restoreDisk(*r)
}

// restoreDisk makes the restore directory's disk copy r's disk (when it is still there).
func (d *Driver) restoreDisk(r nodeRecord) {
	disk := filepath.Join(d.filesDir(r), restoreDir, snapDiskFile)
	if _, err := os.Stat(disk); err == nil {
		_ = os.Rename(disk, r.Rootfs)
		_ = syncDir(d.filesDir(r))
	}
}

// errColdPath marks a restore that did not happen; the caller boots cold.
var errColdPath = errors.New("snapshot restore not possible")

// restore loads r's snapshot into its fresh process (state Not started), points the root drive
// at r's disk and resumes the guest. The snapshot files are gone once the load succeeded.
func (d *Driver) restore(ctx context.Context, c *Client, r *nodeRecord) error {
	dir := filepath.Join(d.filesDir(*r), restoreDir)
	meta := r.Restore
	if meta == nil || !snapshotLoadable(dir) {
		return errColdPath
	}
	if _, err := os.Stat(r.Rootfs); err != nil {
		return fmt.Errorf("disk %s: %v: %w", r.Rootfs, err, errColdPath)
	}
	var ov []NetworkOverride
	var ids []string
	for _, n := range sortedNICs(r.NICs) {
		ov = append(ov, NetworkOverride{IfaceID: n.IfaceID, HostDevName: n.TAP})
		ids = append(ids, n.IfaceID)
	}
	if !slices.Equal(ids, meta.Ifaces) && !(len(ids) == 0 && len(meta.Ifaces) == 0) {
		return fmt.Errorf("snapshot has interfaces %v, the node %v: %w", meta.Ifaces, ids, errColdPath)
	}
	uds := filepath.Join(d.filesDir(*r), vsockFile)
	_ = os.Remove(uds)
	err := c.LoadSnapshot(ctx, SnapshotLoad{SnapshotPath: d.vmmPath(*r, filepath.Join(dir, snapVMFile)),
		MemFilePath:      d.vmmPath(*r, filepath.Join(dir, snapMemFile)),
		NetworkOverrides: ov, VsockOverride: &VsockOverride{UDSPath: d.vmmPath(*r, uds)}})
	if err != nil {
		return err
	}
	// Loaded: never again.
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	r.Restore = nil
	if err := d.writeRecord(*r); err != nil {
		return err
	}
	if err := c.PatchDrive(ctx, rootDriveID, d.vmmPath(*r, r.Rootfs)); err != nil {
		return err
	}
	return c.PatchVM(ctx, VMResumed)
}

func snapshotLoadable(dir string) bool {
	for _, f := range []string{snapVMFile, snapMemFile} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// coldAfterRestore undoes a failed restore: the process goes, the snapshot files go, the disk
// is a fresh copy of the baseline, and a new process gets the pre-boot configuration.
func (d *Driver) coldAfterRestore(ctx context.Context, r *nodeRecord) error {
	if err := killVMM(ctx, r.Name, *r); err != nil {
		return err
	}
	if err := os.RemoveAll(filepath.Join(d.filesDir(*r), restoreDir)); err != nil {
		return err
	}
	r.Restore = nil
	if err := d.writeRecord(*r); err != nil {
		return err
	}
	if err := os.Remove(r.Rootfs); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := copyRootfs(r.Baseline, r.Rootfs, r.BaselineDigest, r.owner()); err != nil {
		return err
	}
	return d.configure(ctx, r)
}
