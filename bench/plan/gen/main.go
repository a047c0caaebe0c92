// Command gen writes a generated topology (bench/plan.Generate) into a directory, for the CLI
// benchmarks (bench/plan/cli.sh).
package main

import (
	"flag"
	"fmt"
	"os"

	"zyvor.dev/sysbox/bench/plan"
)

func main() {
	shape := flag.String("shape", string(plan.DepChain), "chain, fanout or depchain")
	n := flag.Int("n", 11000, "resources")
	dir := flag.String("dir", ".", "output directory")
	tf := flag.Bool("terraform", false, "write the depchain shape as Terraform configuration (terraform_data) instead")
	flag.Parse()
	gen := func() error { return plan.Generate(*dir, plan.Shape(*shape), *n) }
	if *tf {
		gen = func() error { return plan.GenerateTerraform(*dir, *n) }
	}
	if err := gen(); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}
