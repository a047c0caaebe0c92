package nftables

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	nft "github.com/google/nftables"

	"zyvor.dev/sysbox/drivers/linuxnet"
	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestConformance runs the driver conformance suite on the nftables policy driver, in nodes of
// the netns driver (kernel tier).
func TestConformance(t *testing.T) {
	testenv.RequireRoot(t)
	bb := testenv.RequireBinary(t, "busybox")
	reg := driver.NewRegistry()
	nd := netns.New()
	pd := New(reg)
	for _, d := range []driver.Driver{nd, pd} {
		if err := reg.Register(d); err != nil {
			t.Fatal(err)
		}
	}
	drivertest.Run(t, drivertest.Harness{
		Driver:     pd,
		NodeDriver: nd,
		Topology: func(t drivertest.T) string {
			topo := drivertest.RandomTopology()
			t.Cleanup(func() { scrub(nd, topo) })
			return topo
		},
		NodeSpec: func(_ drivertest.T, o substrate.Owner) substrate.NodeSpec {
			return substrate.NodeSpec{Owner: o, Driver: netns.Name, Command: []string{bb, "sleep", "3600"}}
		},
		// Namespace directories that cannot be read (a regular file where the directory should
		// be) are what an unreachable backend looks like to this driver.
		Unreachable: func(t drivertest.T) (driver.Driver, func()) {
			dir, err := os.MkdirTemp("", "conform-")
			if err != nil {
				t.Fatalf("temp dir: %v", err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			file := filepath.Join(dir, "not-a-directory")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatalf("%v", err)
			}
			nodes := &netns.Driver{NetnsDir: file, StateDir: file}
			return &Driver{NetnsDir: file, Resolve: nodes.NodeNetns}, func() {}
		},
		Foreign: func(t drivertest.T, _ string, o substrate.Owner, node substrate.Handle) func() bool {
			return foreignTable(t, nd, node, TableName(o))
		},
	})
}

// foreignTable adds an empty, unmarked table named name inside node's namespace.
func foreignTable(t drivertest.T, nd *netns.Driver, node substrate.Handle, name string) func() bool {
	ns, err := nd.NodeNetns(context.Background(), node)
	if err != nil {
		t.Fatalf("foreign table: %v", err)
	}
	fd, err := ns.Open()
	if err != nil {
		t.Fatalf("foreign table: %v", err)
	}
	t.Cleanup(func() { fd.Close() })
	c, err := nft.New(nft.WithNetNSFd(int(fd)))
	if err != nil {
		t.Fatalf("foreign table: %v", err)
	}
	c.AddTable(&nft.Table{Name: name, Family: nft.TableFamilyIPv4})
	if err := c.Flush(); err != nil {
		t.Fatalf("foreign table %s: %v", name, err)
	}
	return func() bool {
		exists, marker, err := tableOwner(c, name)
		return err == nil && exists && marker == nil
	}
}

// scrub deletes what the netns driver's audit finds for topology (nodes take their tables
// with them). Test clean-up only.
func scrub(nd *netns.Driver, topology string) {
	ctx := context.Background()
	objs, _ := nd.Residue(ctx, topology)
	for _, o := range objs {
		if o.Kind == "netns" {
			if h, err := nd.HandleFor(o.ExternalID); err == nil {
				_ = nd.DeleteNode(ctx, h, o.Owner)
			}
		}
	}
	objs, _ = nd.Residue(ctx, topology)
	for _, o := range objs {
		switch o.Kind {
		case "bridge":
			_ = linuxnet.DeleteBridge(ctx, o.ExternalID, o.Owner)
		case "veth":
			_ = linuxnet.DeleteVeth(ctx, o.ExternalID, o.Owner)
		case "nft-rule":
			_ = linuxnet.RemoveForwardAccept("", o.Owner)
		}
	}
}
