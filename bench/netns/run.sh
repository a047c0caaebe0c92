#!/usr/bin/env bash
# Side-by-side: N netns nodes on one bridge, created then destroyed, by the sysbox netns driver
# (parallel) and by an iproute2 script. Prints both and the ratio (ours / script; lower is
# better; the target is ≤ 0.5 for apply and for destroy). Needs root.
set -euo pipefail
cd "$(dirname "$0")"
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
n=${N:-100}
par=${PARALLEL:-8}
command -v bc >/dev/null || { apt-get update -qq && apt-get install -y -qq bc >/dev/null; }
bin=$(mktemp -d)/netns-bench
go build -o "$bin" .
ours=$("$bin" -n "$n" -parallel "$par")
sleep 2 # let the kernel finish freeing namespaces before the next run
theirs=$(./ip-baseline.sh "$n")
echo "$ours"
echo "$theirs"
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
ra=$(echo "scale=3; $(get "$ours" apply_s) / $(get "$theirs" apply_s)" | bc)
rd=$(echo "scale=3; $(get "$ours" destroy_s) / $(get "$theirs" destroy_s)" | bc)
echo "ratio apply=$ra destroy=$rd (ours/script; target <= 0.5)"
