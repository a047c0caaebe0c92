// Command netns-bench creates and destroys N netns nodes on one bridge through the netns driver
// (in parallel, as `sysbox apply` would), and prints the apply and destroy wall times. run.sh
// runs it side by side with ip-baseline.sh, which does the same with `ip` commands.
//
// Per node, apply = CreateNode + Attach (veth into the bridge, MAC, IPv4) +
// ConfigureGuestNetwork + StartNode (main process `sleep infinity`); destroy = Detach +
// DeleteNode (kills the process, removes the namespace); then the bridge is deleted.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"zyvor.dev/sysbox/drivers/netns"
	"zyvor.dev/sysbox/pkg/substrate"
)

func main() {
	n := flag.Int("n", 100, "nodes")
	par := flag.Int("parallel", 10, "operations at once")
	stateDir := flag.String("state-dir", "", "driver state directory (default /run/sysbox/netns)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the run to `FILE`")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*n, *par, *stateDir); err != nil {
		fmt.Fprintln(os.Stderr, "netns-bench:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

type node struct {
	h     substrate.Handle
	owner substrate.Owner
	att   substrate.AttachmentState
}

func run(n, par int, stateDir string) (err error) {
	ctx := context.Background()
	d := netns.New()
	if stateDir != "" {
		d.StateDir = stateDir
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	topo := "bench-" + hex.EncodeToString(b)
	netOwner := substrate.Owner{Topology: topo, Address: "sysbox_network.bench", Type: "sysbox_network", Generation: 1}

	defer func() {
		if err != nil {
			// remove what the failed run left, through the driver's ownership-checked calls
			if serr := d.Scrub(ctx, topo); serr != nil {
				err = errors.Join(err, fmt.Errorf("clean up topology %s: %w", topo, serr))
			}
		}
	}()
	start := time.Now()
	nh, err := d.CreateNetwork(ctx, substrate.NetworkSpec{Owner: netOwner, IPv4CIDR: "198.18.0.0/16"})
	if err != nil {
		return err
	}
	nodes := make([]*node, n)
	err = each(n, par, func(i int) error {
		o := substrate.Owner{Topology: topo, Address: fmt.Sprintf("sysbox_node.n[%d]", i), Type: "sysbox_node", Generation: 1}
		spec := substrate.NodeSpec{Owner: o, Driver: netns.Name, Command: []string{"sleep", "infinity"}}
		h, err := d.CreateNode(ctx, spec)
		if err != nil {
			return err
		}
		att, err := d.Attach(ctx, h, substrate.AttachmentSpec{Owner: o, Node: o.Address, Name: "lan", Network: nh,
			IPv4: []string{fmt.Sprintf("198.18.%d.%d/16", (i+10)/250, (i+10)%250+1)}})
		if err != nil {
			return err
		}
		if err := d.ConfigureGuestNetwork(ctx, h, []substrate.AttachmentState{att}, nil); err != nil {
			return err
		}
		if err := d.StartNode(ctx, h, spec); err != nil {
			return err
		}
		nodes[i] = &node{h: h, owner: o, att: att}
		return nil
	})
	apply := time.Since(start)
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}

	start = time.Now()
	err = each(n, par, func(i int) error {
		nd := nodes[i]
		if err := d.Detach(ctx, nd.h, nd.att, nd.owner); err != nil {
			return err
		}
		return d.DeleteNode(ctx, nd.h, nd.owner)
	})
	if err == nil {
		err = d.DeleteNetwork(ctx, nh, netOwner)
	}
	destroy := time.Since(start)
	if err != nil {
		return fmt.Errorf("destroy: %w", err)
	}
	var res []substrate.Object
	res, err = d.Residue(ctx, topo)
	if err != nil {
		return err
	}
	if len(res) != 0 {
		return fmt.Errorf("residue after destroy: %v", res)
	}
	fmt.Printf("sysbox-netns nodes=%d parallel=%d apply_s=%.3f destroy_s=%.3f\n", n, par, apply.Seconds(), destroy.Seconds())
	return nil
}

func each(n, par int, fn func(i int) error) error {
	var wg sync.WaitGroup
	sem := make(chan struct{}, par)
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				errs <- fmt.Errorf("node %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}
