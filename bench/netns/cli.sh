#!/usr/bin/env bash
# Side-by-side, end to end: `sysbox apply` / `sysbox destroy` of 100 netns nodes on one network
# (planning, checkpoints, state saves and the residue audit included) against ip-baseline.sh doing
# the same wiring with iproute2. ROUNDS rounds, alternating; prints each round and the median
# ratio (ours / script; target ≤ 0.5). Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
n=${N:-100}
rounds=${ROUNDS:-3}
command -v bc >/dev/null || { apt-get update -qq && apt-get install -y -qq bc >/dev/null; }
work=$(mktemp -d)
trap 'cd "$work" && "$work/sysbox" destroy -auto-approve >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
(cd "$here/../.." && go build -o "$work/sysbox" ./cmd/sysbox)
mkdir -p "$work/lab"
cat >"$work/lab/main.sysbox.hcl" <<HCL
substrate "local" {
  driver "netns" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_network" "lan" { ipv4_cidr = "198.18.0.0/16" }
resource "sysbox_node" "n" {
  count   = $n
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["\${cidrhost("198.18.0.0/16", 10 + count.index)}/16"]
  }
}
HCL
now() { date +%s.%N; }
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ra=(); rd=()
cd "$work/lab"
for r in $(seq 1 "$rounds"); do
  t0=$(now); "$work/sysbox" apply -auto-approve >/dev/null; t1=$(now)
  "$work/sysbox" destroy -auto-approve >/dev/null; t2=$(now)
  ours="sysbox-cli nodes=$n apply_s=$(echo "$t1 - $t0" | bc) destroy_s=$(echo "$t2 - $t1" | bc)"
  sleep 2 # let the kernel finish freeing namespaces
  theirs=$("$here/ip-baseline.sh" "$n")
  sleep 2
  echo "round $r: $ours"
  echo "round $r: $theirs"
  ra+=("$(echo "scale=3; $(get "$ours" apply_s) / $(get "$theirs" apply_s)" | bc)")
  rd+=("$(echo "scale=3; $(get "$ours" destroy_s) / $(get "$theirs" destroy_s)" | bc)")
done
echo "median ratio apply=$(printf '%s\n' "${ra[@]}" | median) destroy=$(printf '%s\n' "${rd[@]}" | median) (sysbox CLI / script over $rounds rounds; target <= 0.5)"
