#!/usr/bin/env bash
# Writes the benchmark lab's configuration: N netns nodes (count), PER per network, on the local
# state backend, into DIR/main.sysbox.hcl. Used by bench/netns/cli.sh and bench/plan/nochange.sh.
#   bench/netns/lab.sh DIR N PER
set -euo pipefail
dir=$1 n=$2 per=$3
nets=$(( (n + per - 1) / per ))
mkdir -p "$dir"
cat >"$dir/main.sysbox.hcl" <<HCL
substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_network" "lan" {
  count     = $nets
  ipv4_cidr = cidrsubnet("198.18.0.0/15", 9, count.index)
}
resource "sysbox_node" "n" {
  count   = $n
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan[floor(count.index / $per)]
    ipv4    = ["\${cidrhost(cidrsubnet("198.18.0.0/15", 9, floor(count.index / $per)), 2 + count.index % $per)}/24"]
  }
}
HCL
