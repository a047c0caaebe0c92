package libvirt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestConformance runs the driver conformance suite on the libvirt driver against the real
// libvirtd (daemon tier). The domains boot a blank disk (they sit in the firmware), so the suite
// does not wait for a guest agent: it checks definition, start, observation, ownership, taps,
// reset and audit. A guest with an agent is booted by the VM tests.
func TestConformance(t *testing.T) {
	d := daemonDriver(t, -1)
	disk := blankDisk(t)
	art := resolved(t, d, disk)
	drivertest.Run(t, drivertest.Harness{
		Driver: d,
		Topology: func(t drivertest.T) string {
			topo := drivertest.RandomTopology()
			cleanupTopology(t, d, topo)
			return topo
		},
		NodeSpec: func(_ drivertest.T, o substrate.Owner) substrate.NodeSpec {
			return substrate.NodeSpec{Owner: o, Driver: Name, Artifact: &art, MemoryMB: 64}
		},
		Network: func(t drivertest.T, o substrate.Owner, _ string) substrate.Handle {
			return testBridge(t, o.Topology, "")
		},
		// A libvirtd socket that does not exist (in a directory that does not either).
		Unreachable: func(t drivertest.T) (driver.Driver, func()) {
			u, err := New(Options{Socket: filepath.Join(os.TempDir(), "sysbox-conform-no-libvirtd-"+randHex(6), "libvirt-sock"),
				StateDir: d.stateDir, DomainType: TypeQEMU, ReadyTimeout: -1})
			if err != nil {
				t.Fatalf("driver on a dead socket: %v", err)
			}
			return u, func() { u.Close() }
		},
		Foreign: func(t drivertest.T, _ string, o substrate.Owner, _ substrate.Handle) func() bool {
			return foreignDomain(t, d, domainName(o))
		},
		Artifact: func(drivertest.T) substrate.ArtifactSpec {
			return substrate.ArtifactSpec{Kind: KindQCOW2, Source: disk}
		},
	})
}

// foreignDomain defines a domain without sysbox metadata under name and returns a probe that it
// is still there, with its UUID and without metadata.
func foreignDomain(t drivertest.T, d *Driver, name string) func() bool {
	ctx := context.Background()
	c, err := d.conn(ctx)
	if err != nil {
		t.Fatalf("foreign domain %s: %v", name, err)
	}
	uuid := newUUID()
	doc := fmt.Sprintf(`<domain type="qemu"><name>%s</name><uuid>%s</uuid><memory unit="MiB">32</memory><os><type arch="x86_64">hvm</type></os></domain>`, name, uuid)
	dom, err := c.DomainDefineXML(doc)
	if err != nil {
		t.Fatalf("foreign domain %s: %v", name, err)
	}
	t.Cleanup(func() { _ = c.DomainUndefineFlags(dom, undefineFlags) })
	return func() bool {
		got, err := c.DomainLookupByName(name)
		if err != nil || formatUUID(got.UUID) != uuid {
			return false
		}
		x, err := domainXML(c, got)
		if err != nil {
			return false
		}
		_, marked := findMeta(x)
		return !marked
	}
}
