// Command fluxvm-upgrade runs crash-safe, evidence-producing upgrades of eBPF components that
// preserve declared pinned-map state. See docs/fluxvm-upgrade.md.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
