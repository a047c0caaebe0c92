#!/usr/bin/env bash
# Side-by-side, end to end: `sysbox apply` / `sysbox destroy` of N netns nodes, PER nodes per
# network (planning, checkpoints, state saves and the residue audit included), against
# ip-baseline.sh doing the same wiring with iproute2 (one bridge, sequential, as such scripts
# do). ROUNDS rounds, alternating. Each round prints one line per phase: ours, the script's and
# the ratio (ours / script; targets: apply <= 0.2, destroy <= 0.3 at 1,000 nodes), with our peak
# RSS (GNU time) and CPU time (user+system: ours; the rest of the wall time is the kernel's work
# done on our behalf and waiting). Needs root.
#   N=1000 PER=10 ROUNDS=1 bench/netns/cli.sh
# SYSBOX_BIN=PATH measures that binary instead of building this tree's.
# PROFILE=DIR writes CPU profiles of each round's apply and destroy there (SYSBOX_CPUPROFILE).
# PEER=0 skips the ip script (to compare two sysbox builds at one load; no ratio then).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
n=${N:-100}
per=${PER:-10}
rounds=${ROUNDS:-3}
command -v bc >/dev/null || { apt-get update -qq && apt-get install -y -qq bc >/dev/null; }
work=$(mktemp -d)
trap 'cd "$work/lab" && "$work/sysbox" destroy -auto-approve >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
if [ -n "${SYSBOX_BIN:-}" ]; then cp "$SYSBOX_BIN" "$work/sysbox"; else (cd "$here/../.." && go build -o "$work/sysbox" ./cmd/sysbox); fi
"$here/lab.sh" "$work/lab" "$n" "$per"
get() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# timed CMD...: runs CMD under GNU time; prints "wall cpu rss_mb user sys".
timed() {
  local t; t=$(mktemp)
  /usr/bin/time -f "%e %U %S %M" -o "$t" "$@" >/dev/null
  awk '{printf "%.2f %.2f %.0f %.2f %.2f\n", $1, $2 + $3, $4 / 1024, $2, $3}' "$t"; rm -f "$t"
}
ra=(); rd=()
cd "$work/lab"
for r in $(seq 1 "$rounds"); do
  [ -n "${PROFILE:-}" ] && export SYSBOX_CPUPROFILE="$PROFILE/apply-$n-$r.cpu"
  read -r aw ac am au as < <(timed "$work/sysbox" apply -auto-approve)
  [ -n "${PROFILE:-}" ] && export SYSBOX_CPUPROFILE="$PROFILE/destroy-$n-$r.cpu"
  read -r dw dc dm du ds < <(timed "$work/sysbox" destroy -auto-approve)
  unset SYSBOX_CPUPROFILE
  sleep 2 # let the kernel finish freeing namespaces
  if [ "${PEER:-1}" = 0 ]; then
    echo "round $r nodes=$n per_network=$per apply: sysbox ${aw}s (cpu ${ac}s = user ${au} + sys ${as}, rss ${am}MB)"
    echo "round $r nodes=$n per_network=$per destroy: sysbox ${dw}s (cpu ${dc}s = user ${du} + sys ${ds}, rss ${dm}MB)"
    continue
  fi
  theirs=$("$here/ip-baseline.sh" "$n")
  sleep 2
  ia=$(get "$theirs" apply_s); id=$(get "$theirs" destroy_s)
  ra+=("$(echo "scale=3; $aw / $ia" | bc)"); rd+=("$(echo "scale=3; $dw / $id" | bc)")
  echo "round $r nodes=$n per_network=$per apply: sysbox ${aw}s (cpu ${ac}s = user ${au} + sys ${as}, rss ${am}MB) ip ${ia}s ratio ${ra[-1]}"
  echo "round $r nodes=$n per_network=$per destroy: sysbox ${dw}s (cpu ${dc}s = user ${du} + sys ${ds}, rss ${dm}MB) ip ${id}s ratio ${rd[-1]}"
done
[ "${PEER:-1}" = 0 ] && exit 0
echo "median ratio nodes=$n apply=$(printf '%s\n' "${ra[@]}" | median) destroy=$(printf '%s\n' "${rd[@]}" | median) (sysbox CLI / ip script over $rounds rounds; targets at 1,000 nodes: apply <= 0.2, destroy <= 0.3)"
