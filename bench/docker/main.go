// Command dockerbench compares the docker driver with the docker CLI on the same image: N
// containers created+started (and then destroyed) through the driver in parallel, side by side
// with a sequential `docker run -d` / `docker rm -f` loop. It prints both times and their ratio.
//
//	go run ./bench/docker -n 20 -parallel 20 -rounds 3
//
// Needs root, a running dockerd, the docker CLI and /bin/busybox (busybox-static). Everything it
// creates carries a fresh topology id and is removed at the end, also on failure.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"zyvor.dev/sysbox/drivers/docker"
	"zyvor.dev/sysbox/drivers/docker/imagetest"
	"zyvor.dev/sysbox/internal/argv"
	"zyvor.dev/sysbox/pkg/substrate"
)

func main() {
	n := flag.Int("n", 20, "containers per round")
	par := flag.Int("parallel", 20, "driver calls in flight")
	rounds := flag.Int("rounds", 3, "rounds of each (the median is reported)")
	flag.Parse()
	if err := run(*n, *par, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "dockerbench:", err)
		os.Exit(1)
	}
}

type timing struct{ apply, destroy time.Duration }

func run(n, par, rounds int) error {
	ctx := context.Background()
	dockerCLI, err := exec.LookPath("docker")
	if err != nil {
		return fmt.Errorf("docker CLI: %w", err)
	}
	d, err := docker.New(docker.Options{})
	if err != nil {
		return err
	}
	defer d.Close()

	dir, err := os.MkdirTemp("", "dockerbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	topo := "bench-" + randHex(6)
	rootfs, err := imagetest.Rootfs(imagetest.Busybox, topo)
	if err != nil {
		return err
	}
	archive := filepath.Join(dir, "rootfs.tar")
	if err := os.WriteFile(archive, rootfs, 0o644); err != nil {
		return err
	}
	art, err := d.ResolveArtifact(ctx, substrate.ArtifactSpec{Kind: docker.KindRootfs, Source: archive})
	if err != nil {
		return err
	}
	defer func() {
		_, _ = (argv.Exec{}).Run(ctx, argv.Cmd{Argv: []string{dockerCLI, "rmi", "-f", art.Ref}})
	}()

	var drv, cli []timing
	for r := 0; r < rounds; r++ {
		t, err := driverRound(ctx, d, art, fmt.Sprintf("%s-r%d", topo, r), n, par)
		if err != nil {
			return fmt.Errorf("driver round %d: %w", r, err)
		}
		drv = append(drv, t)
		t, err = cliRound(ctx, dockerCLI, art.Ref, n)
		if err != nil {
			return fmt.Errorf("cli round %d: %w", r, err)
		}
		cli = append(cli, t)
		fmt.Printf("round %d: driver apply %v destroy %v | cli loop run %v rm %v\n", r+1,
			drv[r].apply.Round(time.Millisecond), drv[r].destroy.Round(time.Millisecond),
			cli[r].apply.Round(time.Millisecond), cli[r].destroy.Round(time.Millisecond))
	}
	da, dd := median(drv)
	ca, cd := median(cli)
	fmt.Printf("\n%d containers, median of %d rounds (driver: %d in flight; cli: sequential)\n", n, rounds, par)
	fmt.Printf("%-28s %10s %10s\n", "", "apply", "destroy")
	fmt.Printf("%-28s %10v %10v\n", "sysbox docker driver", da.Round(time.Millisecond), dd.Round(time.Millisecond))
	fmt.Printf("%-28s %10v %10v\n", "docker run -d / rm -f loop", ca.Round(time.Millisecond), cd.Round(time.Millisecond))
	fmt.Printf("%-28s %10.2f %10.2f   (target ≤ 0.70)\n", "ratio driver/loop", da.Seconds()/ca.Seconds(), dd.Seconds()/cd.Seconds())
	return nil
}

func driverRound(ctx context.Context, d *docker.Driver, art substrate.ArtifactIdentity, topo string, n, par int) (timing, error) {
	var t timing
	handles := make([]substrate.Handle, n)
	owners := make([]substrate.Owner, n)
	defer func() { // failure clean-up: whatever is still there
		for i, h := range handles {
			if h.ExternalID != "" {
				_ = d.DeleteNode(ctx, h, owners[i])
			}
		}
	}()
	start := time.Now()
	err := parallel(n, par, func(i int) error {
		owners[i] = substrate.Owner{Topology: topo, Address: fmt.Sprintf("sysbox_node.n[%d]", i), Type: "sysbox_node", Generation: 1}
		spec := substrate.NodeSpec{Owner: owners[i], Driver: docker.Name, Artifact: &art, Command: []string{"sleep", "3600"}}
		h, err := d.CreateNode(ctx, spec)
		if err != nil {
			return err
		}
		handles[i] = h
		return d.StartNode(ctx, h, spec)
	})
	t.apply = time.Since(start)
	if err != nil {
		return t, err
	}
	start = time.Now()
	err = parallel(n, par, func(i int) error {
		if err := d.DeleteNode(ctx, handles[i], owners[i]); err != nil {
			return err
		}
		handles[i] = substrate.Handle{}
		return nil
	})
	t.destroy = time.Since(start)
	if err != nil {
		return t, err
	}
	res, err := d.Residue(ctx, topo)
	if err != nil {
		return t, err
	}
	if len(res) != 0 {
		return t, fmt.Errorf("residue after destroy: %+v", res)
	}
	return t, nil
}

func cliRound(ctx context.Context, cli, image string, n int) (timing, error) {
	var t timing
	var ids []string
	defer func() {
		if len(ids) > 0 {
			_, _ = (argv.Exec{}).Run(ctx, argv.Cmd{Argv: append([]string{cli, "rm", "-f"}, ids...)})
		}
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		res, err := (argv.Exec{}).Run(ctx, argv.Cmd{Argv: []string{cli, "run", "-d", "--init", "--network", "none", image, "sleep", "3600"}})
		if err != nil {
			return t, err
		}
		ids = append(ids, strings.TrimSpace(string(res.Stdout)))
	}
	t.apply = time.Since(start)
	start = time.Now()
	for len(ids) > 0 {
		if _, err := (argv.Exec{}).Run(ctx, argv.Cmd{Argv: []string{cli, "rm", "-f", ids[0]}}); err != nil {
			return t, err
		}
		ids = ids[1:]
	}
	t.destroy = time.Since(start)
	return t, nil
}

func parallel(n, par int, fn func(i int) error) error {
	if par < 1 {
		par = 1
	}
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(i)
		}(i)
	}
	wg.Wait()
	return errors.Join(errs...)
}

func median(ts []timing) (apply, destroy time.Duration) {
	a := make([]time.Duration, len(ts))
	b := make([]time.Duration, len(ts))
	for i, t := range ts {
		a[i], b[i] = t.apply, t.destroy
	}
	sort.Slice(a, func(i, j int) bool { return a[i] < a[j] })
	sort.Slice(b, func(i, j int) bool { return b[i] < b[j] })
	return a[len(a)/2], b[len(b)/2]
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
