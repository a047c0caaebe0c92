package nftables

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

func policyHandle(t *testing.T, owner substrate.Owner) substrate.Handle {
	t.Helper()
	p, err := json.Marshal(private{Table: TableName(owner)})
	if err != nil {
		t.Fatal(err)
	}
	return substrate.Handle{Driver: Name, ExternalID: TableName(owner), Private: substrate.Envelope{Driver: Name, Version: envelopeVersion, Data: p}}
}

// Only ENOENT says a node's namespace is gone. A namespace path that cannot be opened for any
// other reason (here ENOTDIR) used to read as absent and let DeletePolicy report success; now
// ObservePolicy is unknown (ErrUnavailable) and DeletePolicy refuses.
func TestNamespaceThatCannotBeOpenedIsNotGone(t *testing.T) {
	ctx := context.Background()
	owner := substrate.Owner{Topology: "test-nft", Address: "sysbox_firewall.fw", Type: "sysbox_firewall", Generation: 1}
	h := policyHandle(t, owner)
	node := substrate.Handle{Driver: "netns", ExternalID: "n1"}
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		path   string
		gone   bool
		errnum error
	}{
		{"ENOTDIR", filepath.Join(file, "ns"), false, unix.ENOTDIR},
		{"ENOENT", filepath.Join(dir, "missing"), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &Driver{Resolve: func(context.Context, substrate.Handle) (linuxnet.Netns, error) {
				return linuxnet.Netns{Path: tc.path}, nil
			}}
			obs, oerr := d.ObservePolicy(ctx, node, h, nil, substrate.PolicySpec{Owner: owner})
			derr := d.DeletePolicy(ctx, node, h, owner)
			if tc.gone {
				if obs.Status != substrate.Absent || oerr != nil || derr != nil {
					t.Fatalf("gone namespace: observe %s, %v; delete %v; want absent, nil, nil", obs.Status, oerr, derr)
				}
				return
			}
			if obs.Status != substrate.Unknown || !errors.Is(oerr, driver.ErrUnavailable) || !errors.Is(oerr, tc.errnum) {
				t.Fatalf("ObservePolicy: got %s, %v; want unknown with ErrUnavailable and %v", obs.Status, oerr, tc.errnum)
			}
			if !errors.Is(derr, tc.errnum) {
				t.Fatalf("DeletePolicy: got %v, want a refusal with %v", derr, tc.errnum)
			}
		})
	}
}

// A namespace under NetnsDir that cannot be entered (a UTS namespace bind mount: nsfs, but no
// network netlink) makes the residue audit fail instead of reading "clean".
func TestKernelResidueRefusesUnreadableNamespace(t *testing.T) {
	testenv.RequireRoot(t)
	d := &Driver{NetnsDir: t.TempDir()}
	path := filepath.Join(d.NetnsDir, "sbx-unreadable")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/uts", path, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mount a UTS namespace at %s: %v", path, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(path, unix.MNT_DETACH) })
	if objs, err := d.Residue(context.Background(), "test-nft-unreadable"); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Residue: got %+v, %v; want an error naming %s", objs, err, path)
	}
	// Without it the audit reads the host's namespaces cleanly (nothing of this topology).
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	if objs, err := d.Residue(context.Background(), "test-nft-unreadable"); err != nil || len(objs) != 0 {
		t.Fatalf("Residue without the unreadable namespace: got %+v, %v; want none", objs, err)
	}
}
