package nftables

import (
	"context"
	"testing"

	nft "github.com/google/nftables"

	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestConformance runs the driver conformance suite on the nftables policy driver, in nodes of
// the netns driver (kernel tier).
func TestConformance(t *testing.T) {
	nd, pd, bb := policyRig(t)
	drivertest.Run(t, drivertest.Harness{
		Driver:     pd,
		NodeDriver: nd,
		Topology: func(t drivertest.T) string {
			topo := drivertest.RandomTopology()
			t.Cleanup(func() { _ = nd.Scrub(context.Background(), topo) })
			return topo
		},
		NodeSpec: func(_ drivertest.T, o substrate.Owner) substrate.NodeSpec {
			return substrate.NodeSpec{Owner: o, Driver: netns.Name, Command: []string{bb, "sleep", "3600"}}
		},
		// Namespace directories that cannot be read (a regular file where the directory should
		// be) are what an unreachable backend looks like to this driver.
		Unreachable: func(t drivertest.T) (driver.Driver, func()) {
			file := drivertest.NotADirectory(t)
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

// policyRig returns the netns node driver and this driver registered together (kernel tier),
// and busybox.
func policyRig(t *testing.T) (*netns.Driver, *Driver, string) {
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
	return nd, pd, bb
}
