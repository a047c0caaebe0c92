package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"zyvor.dev/sysbox/drivers/docker"
	"zyvor.dev/sysbox/drivers/docker/imagetest"
	"zyvor.dev/sysbox/internal/testenv"
	"zyvor.dev/sysbox/pkg/substrate"
)

// The same comparison as `go run ./bench/docker`, as go test benchmarks (one op = 20 containers
// applied and destroyed):
//
//	go test -run '^$' -bench . -benchtime 3x ./bench/docker

func benchSetup(b *testing.B) (*docker.Driver, substrate.ArtifactIdentity, string) {
	testenv.RequireRoot(b)
	cli := testenv.RequireBinary(b, "docker")
	d, err := docker.New(docker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { d.Close() })
	if _, err := exec.Command(cli, "version").Output(); err != nil {
		testenv.Require(b, false, "needs a running dockerd")
	}
	rootfs, err := imagetest.Rootfs(imagetest.Busybox, "bench-"+randHex(6))
	if err != nil {
		b.Fatal(err)
	}
	p := filepath.Join(b.TempDir(), "rootfs.tar")
	if err := os.WriteFile(p, rootfs, 0o644); err != nil {
		b.Fatal(err)
	}
	art, err := d.ResolveArtifact(context.Background(), substrate.ArtifactSpec{Kind: docker.KindRootfs, Source: p})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = exec.Command(cli, "rmi", "-f", art.Ref).Run() })
	return d, art, cli
}

func BenchmarkDriverParallel20(b *testing.B) {
	d, art, _ := benchSetup(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t, err := driverRound(context.Background(), d, art, "bench-"+randHex(6), 20, 20)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(t.apply.Seconds(), "apply-s/op")
		b.ReportMetric(t.destroy.Seconds(), "destroy-s/op")
	}
}

func BenchmarkCLILoop20(b *testing.B) {
	_, art, cli := benchSetup(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t, err := cliRound(context.Background(), cli, art.Ref, 20)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(t.apply.Seconds(), "apply-s/op")
		b.ReportMetric(t.destroy.Seconds(), "destroy-s/op")
	}
}
