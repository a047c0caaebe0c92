package netns

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// unreadableNetns bind-mounts this process's UTS namespace at dir/name: an nsfs mount, so it
// passes for a mounted namespace, that no network netlink handle can enter (setns EINVAL).
func unreadableNetns(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/uts", path, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mount a UTS namespace at %s: %v", path, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	return path
}

// A namespace whose marker cannot be read is unknown (and the error says unavailable), never
// drifted (the old answer, which let a plan replace it); the residue audit fails instead of
// reading "clean"; DeleteNode refuses.
func TestKernelUnreadableNamespaceFailsClosed(t *testing.T) {
	testenv.RequireRoot(t)
	ctx := context.Background()
	d := &Driver{NetnsDir: t.TempDir(), StateDir: t.TempDir()}
	path := unreadableNetns(t, d.NetnsDir, "sbx-unreadable")
	owner := substrate.Owner{Topology: "test-unreadable", Address: "sysbox_node.web", Type: "sysbox_node", Generation: 1}
	h := substrate.Handle{Driver: Name, ExternalID: "sbx-unreadable", Private: encode(private{Kind: kindNode, Netns: "sbx-unreadable"})}

	obs, err := d.ObserveNode(ctx, h, owner)
	if obs.Status != substrate.Unknown || !errors.Is(err, driver.ErrUnavailable) {
		t.Fatalf("ObserveNode: got %s (%s), %v; want unknown and ErrUnavailable", obs.Status, obs.Reason, err)
	}
	if objs, err := d.Residue(ctx, owner.Topology); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Residue: got %+v, %v; want an error naming %s", objs, err, path)
	}
	if err := d.DeleteNode(ctx, h, owner); err == nil {
		t.Fatal("DeleteNode of a namespace whose marker cannot be read: got nil, want a refusal")
	}
	if ok, err := netnsMount(path); !ok || err != nil {
		t.Fatalf("the unreadable namespace was unmounted: %v %v", ok, err)
	}
}

// A damaged sidecar record makes the residue audit fail (it was skipped: "clean"); a damaged
// intent record makes DeleteNode refuse before it deletes anything (its listing error was
// ignored).
func TestKernelDamagedRecordsFailClosed(t *testing.T) {
	l := newLab(t)
	l.d.StateDir = t.TempDir()
	ctx := context.Background()
	n := l.node("sysbox_node.rec", nil)

	sc := l.d.sidecarPath("sbx-damaged")
	if err := os.WriteFile(sc, []byte(`{"kind":"sysbox`), 0o600); err != nil {
		t.Fatal(err)
	}
	if objs, err := l.d.Residue(ctx, l.topology); err == nil || !strings.Contains(err.Error(), sc) {
		t.Fatalf("Residue with a damaged sidecar: got %+v, %v; want an error naming %s", objs, err, sc)
	}
	if err := os.Remove(sc); err != nil {
		t.Fatal(err)
	}

	if err := os.MkdirAll(l.d.intentDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(l.d.intentDir(), "sbx-damaged.intent")
	if err := os.WriteFile(in, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(in) }) // before the lab's scrub, which audits
	if err := l.d.DeleteNode(ctx, n.h, n.owner); err == nil || !strings.Contains(err.Error(), in) {
		t.Fatalf("DeleteNode with a damaged intent record: got %v, want an error naming %s", err, in)
	}
	if obs, err := l.d.ObserveNode(ctx, n.h, n.owner); err != nil || obs.Status != substrate.Present {
		t.Fatalf("node after the refused delete: got %s (%s), %v; want present", obs.Status, obs.Reason, err)
	}
	if err := os.Remove(in); err != nil {
		t.Fatal(err)
	}
	if err := l.d.DeleteNode(ctx, n.h, n.owner); err != nil {
		t.Fatalf("DeleteNode: %v", err)
	}
	if objs := l.residue(); len(objs) != 0 {
		t.Fatalf("residue after delete: %+v", objs)
	}
}
