package docker

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/container"

	"zyvor.dev/sysbox/internal/driver"
	"zyvor.dev/sysbox/internal/driver/drivertest"
	"zyvor.dev/sysbox/pkg/substrate"
)

// TestConformance runs the driver conformance suite on the docker driver against the real
// daemon (daemon tier).
func TestConformance(t *testing.T) {
	d := daemonDriver(t)
	marker := "conform-" + randHex(6)
	art := resolveTestImage(t, d, "rootfs", marker)
	// The same content as art (the archive is reproducible), so resolving it loads no new image.
	artifactPath := testImage(t, "rootfs", marker)
	drivertest.Run(t, drivertest.Harness{
		Driver: d,
		Topology: func(t drivertest.T) string {
			topo := drivertest.RandomTopology()
			cleanupTopology(t, d, topo)
			return topo
		},
		NodeSpec: func(_ drivertest.T, o substrate.Owner) substrate.NodeSpec {
			return substrate.NodeSpec{Owner: o, Driver: Name, Artifact: &art, Command: []string{"sleep", "3600"}}
		},
		Network: func(t drivertest.T, o substrate.Owner, _ string) substrate.Handle {
			return testBridge(t, o.Topology, "")
		},
		// A daemon socket that does not exist (in a directory that does not either).
		Unreachable: func(t drivertest.T) (driver.Driver, func()) {
			u, err := New(Options{Host: "unix://" + filepath.Join(os.TempDir(), "sysbox-conform-no-daemon-"+randHex(6), "docker.sock")})
			if err != nil {
				t.Fatalf("driver on a dead socket: %v", err)
			}
			return u, func() { u.Close() }
		},
		Foreign: func(t drivertest.T, _ string, o substrate.Owner, _ substrate.Handle) func() bool {
			return foreignContainer(t, d, containerName(o), art.Ref)
		},
		Artifact: func(drivertest.T) substrate.ArtifactSpec {
			return substrate.ArtifactSpec{Kind: KindRootfs, Source: artifactPath}
		},
	})
}

// foreignContainer creates an unlabelled container holding name.
func foreignContainer(t drivertest.T, d *Driver, name, image string) func() bool {
	ctx := context.Background()
	resp, err := d.cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"sleep", "3600"}}, &container.HostConfig{NetworkMode: "none"}, nil, nil, name)
	if err != nil {
		t.Fatalf("foreign container %s: %v", name, err)
	}
	t.Cleanup(func() { _ = d.cli.ContainerRemove(ctx, resp.ID, container.RemoveOptions{Force: true}) })
	return func() bool {
		ins, err := d.cli.ContainerInspect(ctx, name)
		if err != nil {
			return false
		}
		_, marked := ownerFromLabels(ins.Config.Labels)
		return ins.ID == resp.ID && !marked
	}
}
