// Package plan benchmarks decode + graph + plan on generated topologies (bench/plan/run.sh).
package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Shape names a generated topology shape.
type Shape string

const (
	// Chain: every node refers to the previous one (one long reference chain).
	Chain Shape = "chain"
	// FanOut: 100 groups, each a network and nodes attached to it.
	FanOut Shape = "fanout"
	// DepChain: the shape of issue 16, n/11 networks and 10n/11 netns nodes, 10 per network, each
	// node depends_on the previous one (one long chain of 10,000 at n = 11,000).
	DepChain Shape = "depchain"
)

// perFile is how many resources one generated file holds: a large topology is split over many
// files, as people split theirs.
var perFile = 100

// Generate writes a topology of n resources in shape into dir, perFile resources per file.
func Generate(dir string, shape Shape, n int) error {
	var files []*strings.Builder
	cur := func(i int) *strings.Builder {
		for len(files) <= i/perFile {
			files = append(files, &strings.Builder{})
		}
		return files[i/perFile]
	}
	switch shape {
	case Chain:
		fmt.Fprintf(cur(0), "resource \"sysbox_network\" \"n0\" {\n  ipv4_cidr = \"198.18.0.0/16\"\n}\n")
		for i := 1; i < n; i++ {
			prev := fmt.Sprintf("sysbox_node.n%d.hostname", i-1)
			if i == 1 {
				prev = "sysbox_network.n0.ipv4_cidr"
			}
			fmt.Fprintf(cur(i), `resource "sysbox_node" "n%d" {
  hostname = "h%d"
  command  = ["ping", %s]
  attachment "lan" {
    network = sysbox_network.n0
    ipv4    = ["${cidrhost("198.18.0.0/16", %d)}/16"]
  }
}
`, i, i, prev, i)
		}
	case FanOut:
		groups := 100
		per := n / groups
		i := 0
		for g := 0; g < groups; g++ {
			cidr := fmt.Sprintf("198.18.%d.0/24", g)
			if per > 250 {
				cidr = fmt.Sprintf("198.%d.0.0/16", 18+g%2) // large groups: /16s (addresses are never used)
			}
			fmt.Fprintf(cur(i), "resource \"sysbox_network\" \"g%d\" {\n  ipv4_cidr = %q\n}\n", g, cidr)
			i++
			for k := 1; k < per; k++ {
				fmt.Fprintf(cur(i), `resource "sysbox_node" "g%d_n%d" {
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.g%d
    ipv4    = ["${cidrhost(sysbox_network.g%d.ipv4_cidr, %d)}/%s"]
  }
}
`, g, k, g, g, k, cidr[strings.Index(cidr, "/")+1:])
				i++
			}
		}
	case DepChain:
		nets := n / 11
		for g := 0; g < nets; g++ {
			fmt.Fprintf(cur(g), "resource \"sysbox_network\" \"net%d\" {\n  ipv4_cidr = \"198.18.%d.%d/30\"\n}\n",
				g, g/64, g%64*4)
		}
		for i := 0; i < n-nets; i++ {
			dep := ""
			if i > 0 {
				dep = fmt.Sprintf("  depends_on = [sysbox_node.n%d]\n", i-1)
			}
			fmt.Fprintf(cur(nets+i), `resource "sysbox_node" "n%d" {
  driver  = "netns"
  command = ["sleep", "infinity"]
%s  attachment "lan" {
    network = sysbox_network.net%d
  }
}
`, i, dep, i%nets)
		}
	default:
		return fmt.Errorf("unknown shape %q", shape)
	}
	for i, f := range files {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("part%03d.sysbox.hcl", i)), []byte(f.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// GenerateTerraform writes the DepChain shape of n resources as Terraform/OpenTofu
// configuration (the built-in terraform_data resource, so no provider is needed) into dir, for
// the side-by-side run of bench/plan/cli.sh.
func GenerateTerraform(dir string, n int) error {
	var b strings.Builder
	nets := n / 11
	for g := 0; g < nets; g++ {
		fmt.Fprintf(&b, "resource \"terraform_data\" \"net%d\" {\n  input = \"198.18.%d.%d/30\"\n}\n", g, g/64, g%64*4)
	}
	for i := 0; i < n-nets; i++ {
		dep := ""
		if i > 0 {
			dep = fmt.Sprintf("  depends_on = [terraform_data.n%d]\n", i-1)
		}
		fmt.Fprintf(&b, "resource \"terraform_data\" \"n%d\" {\n  input = { command = [\"sleep\", \"infinity\"], network = terraform_data.net%d.input }\n%s}\n", i, i%nets, dep)
	}
	return os.WriteFile(filepath.Join(dir, "main.tf"), []byte(b.String()), 0o644)
}
