#!/usr/bin/env bash
# Side-by-side: N netns nodes on one bridge, created then destroyed, by the sysbox netns driver
# (parallel) and by an iproute2 script, ROUNDS times alternating. Prints every round and the
# median ratio (ours / script; lower is better; the target is ≤ 0.5 for apply and for destroy).
# Needs root. On a shared, loaded machine single rounds vary a lot: read the medians.
set -euo pipefail
cd "$(dirname "$0")"
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
n=${N:-100}
par=${PARALLEL:-10} # sysbox apply's default parallelism
rounds=${ROUNDS:-3}
command -v bc >/dev/null || { apt-get update -qq && apt-get install -y -qq bc >/dev/null; }
bin=$(mktemp -d)/netns-bench
go build -o "$bin" .
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ra=(); rd=()
for r in $(seq 1 "$rounds"); do
  ours=$("$bin" -n "$n" -parallel "$par" 2>/dev/null)
  sleep 2 # let the kernel finish freeing namespaces before the next run
  theirs=$(./ip-baseline.sh "$n")
  sleep 2
  ra+=("$(echo "scale=3; $(get "$ours" apply_s) / $(get "$theirs" apply_s)" | bc)")
  rd+=("$(echo "scale=3; $(get "$ours" destroy_s) / $(get "$theirs" destroy_s)" | bc)")
  echo "round $r nodes=$n apply: driver $(get "$ours" apply_s)s ip $(get "$theirs" apply_s)s ratio ${ra[-1]}; destroy: driver $(get "$ours" destroy_s)s ip $(get "$theirs" destroy_s)s ratio ${rd[-1]}"
done
echo "median ratio apply=$(printf '%s\n' "${ra[@]}" | median) destroy=$(printf '%s\n' "${rd[@]}" | median) (ours/script over $rounds rounds; target <= 0.5)"
