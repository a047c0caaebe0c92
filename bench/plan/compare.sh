#!/usr/bin/env bash
# Before/after on the CLI path: the sysbox of git revision BASE (default: main) and of this tree,
# alternating run by run (so both see the same load), on issue 16's depchain topology of N
# resources: `plan -out`, `validate`, and the plan file of both compared byte for byte (same
# input, same bytes). Per command: median wall, CPU (user+system) and peak RSS of RUNS runs of
# each, and the ratio this tree / BASE on one line.
#   BASE=c68676d N=11000 RUNS=5 bench/plan/compare.sh
# Run it under the bench lock on a shared host: flock -o /tmp/sysbox-bench.lock bench/plan/compare.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export PATH=/usr/local/go/bin:$PATH
base=${BASE:-main}
n=${N:-11000}
runs=${RUNS:-5}
work=$(mktemp -d)
cleanup() {
  git -C "$root" worktree remove --force "$work/base-tree" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
git -C "$root" worktree add --detach "$work/base-tree" "$base" >/dev/null 2>&1
(cd "$work/base-tree" && go build -o "$work/sysbox-base" ./cmd/sysbox)
(cd "$root" && go build -o "$work/sysbox-new" ./cmd/sysbox && go build -o "$work/gen" ./bench/plan/gen)
mkdir -p "$work/big"
"$work/gen" -shape depchain -n "$n" -dir "$work/big"
median() { sort -n | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
# one BIN OUT CMD...: one run of BIN CMD in the topology, "wall cpu rss_mb" appended to OUT.
one() {
  local bin=$1 out=$2; shift 2
  (cd "$work/big" && /usr/bin/time -f "%e %U %S %M" -o "$work/t" "$bin" "$@" >/dev/null 2>&1)
  awk '{printf "%.3f %.2f %.0f\n", $1, $2 + $3, $4 / 1024}' "$work/t" >>"$out"
}
col() { awk -v c="$1" '{print $c}' "$2" | median; }
echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); base $(git -C "$root" rev-parse --short "$base"), this tree $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet || echo '+changes'); $runs alternating runs each, median"
for what in "plan -out p.plan" "validate"; do
  : >"$work/base.txt"; : >"$work/new.txt"
  for _ in $(seq 1 "$runs"); do
    # shellcheck disable=SC2086
    one "$work/sysbox-base" "$work/base.txt" $what
    [ "$what" = validate ] || mv "$work/big/p.plan" "$work/base.plan"
    # shellcheck disable=SC2086
    one "$work/sysbox-new" "$work/new.txt" $what
  done
  if [ "$what" != validate ]; then
    if cmp -s "$work/base.plan" "$work/big/p.plan"; then same="plan files identical"; else same="PLAN FILES DIFFER"; fi
  else
    same=""
  fi
  bw=$(col 1 "$work/base.txt"); bc_=$(col 2 "$work/base.txt"); bm=$(col 3 "$work/base.txt")
  nw=$(col 1 "$work/new.txt"); nc=$(col 2 "$work/new.txt"); nm=$(col 3 "$work/new.txt")
  echo "depchain n=$n sysbox ${what%% *}: this tree ${nw}s (cpu ${nc}s, rss ${nm}MB) base ${bw}s (cpu ${bc_}s, rss ${bm}MB) ratio wall $(echo "scale=2; $nw / $bw" | bc) cpu $(echo "scale=2; $nc / $bc_" | bc) rss $(echo "scale=2; $nm / $bm" | bc)${same:+; $same}"
done
echo "after: load average $(cut -d' ' -f1-3 /proc/loadavg)"
