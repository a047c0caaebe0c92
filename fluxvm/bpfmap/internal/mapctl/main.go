// Command mapctl creates, fills, dumps and removes one explicitly named pinned BPF map. The
// kernel-tier tests use it as a component's apply/rollback hook: it recreates the map at a pin
// the way an upgraded component would (new map, possibly new max_entries or value size).
//
//	mapctl create -pin P [-type Hash] [-key 8] [-value 16] [-max 1024] [-flags 0] [-replace]
//	              [-fill N -start S -seed X]
//	mapctl fill   -pin P -fill N [-start S] [-seed X]
//	mapctl dump   -pin P
//	mapctl rm     -pin P
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/cilium/ebpf"

	"zyvor.dev/sysbox/fluxvm/bpfmap"
	"zyvor.dev/sysbox/fluxvm/bpfmap/internal/testmap"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mapctl:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: mapctl create|fill|dump|rm -pin PATH [flags]")
	}
	cmd := args[0]
	fs := flag.NewFlagSet("mapctl "+cmd, flag.ContinueOnError)
	pin := fs.String("pin", "", "pin path (required)")
	typ := fs.String("type", "Hash", "map type")
	key := fs.Uint("key", 8, "key size")
	value := fs.Uint("value", 16, "value size")
	maxE := fs.Uint("max", 1024, "max entries")
	flags := fs.Uint("flags", 0, "map flags")
	replace := fs.Bool("replace", false, "unpin an existing map first")
	fill := fs.Uint64("fill", 0, "entries to write")
	start := fs.Uint64("start", 0, "first entry index")
	seed := fs.Uint64("seed", 1, "value seed")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *pin == "" {
		return fmt.Errorf("%s: -pin is required", cmd)
	}
	switch cmd {
	case "create":
		t, err := bpfmap.ParseType(*typ)
		if err != nil {
			return err
		}
		m, err := testmap.Create(*pin, testmap.Params{Type: t, KeySize: uint32(*key), ValueSize: uint32(*value),
			MaxEntries: uint32(*maxE), Flags: uint32(*flags)}, *replace)
		if err != nil {
			return err
		}
		defer m.Close()
		return testmap.Fill(m, *start, *fill, *seed)
	case "fill":
		m, err := ebpf.LoadPinnedMap(*pin, nil)
		if err != nil {
			return err
		}
		defer m.Close()
		return testmap.Fill(m, *start, *fill, *seed)
	case "dump":
		m, err := ebpf.LoadPinnedMap(*pin, &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			return err
		}
		defer m.Close()
		d, err := testmap.Dump(m)
		if err != nil {
			return err
		}
		for _, l := range testmap.Lines(d) {
			fmt.Println(l)
		}
		return nil
	case "rm":
		if err := os.Remove(*pin); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", cmd)
}
