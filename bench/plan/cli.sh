#!/usr/bin/env bash
# The CLI path, end to end (process start, decode, evaluate, graph, plan, plan file written),
# with Go's default garbage collector: `sysbox plan -out` and `sysbox validate` of issue 16's
# topology (N resources: N/11 networks and 10N/11 netns nodes in one depends_on chain), RUNS
# runs each, median wall time, CPU time (user+system) and peak RSS from GNU time.
# Targets at N=11000: plan < 1 s and < 250 MB, validate < 0.5 s.
# Side by side, when `terraform` (or `tofu`) is on PATH: the same shape at PEER_N resources
# (terraform_data resources, no provider) with `terraform plan -refresh=false -out`, against
# `sysbox plan -out` at PEER_N in the same run (the peer takes about a minute at 1,100 here).
#   N=11000 PEER_N=1100 RUNS=5 bench/plan/cli.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/go/bin:$PATH
n=${N:-11000}
peer_n=${PEER_N:-1100}
runs=${RUNS:-5}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$here/../.." && go build -o "$work/sysbox" ./cmd/sysbox && go build -o "$work/gen" ./bench/plan/gen)
median() { sort -n | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
# measure DIR CMD...: RUNS runs of CMD in DIR; prints the median run's "wall cpu rss_mb".
measure() {
  local dir=$1; shift
  local t; t=$(mktemp)
  for _ in $(seq 1 "$runs"); do
    (cd "$dir" && /usr/bin/time -f "%e %U %S %M" -o "$t.1" "$@" >/dev/null 2>&1)
    awk '{printf "%.3f %.2f %.0f\n", $1, $2 + $3, $4 / 1024}' "$t.1" >>"$t"
  done
  median <"$t"; rm -f "$t" "$t.1"
}
echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $runs runs each, median"
mkdir -p "$work/big"
"$work/gen" -shape depchain -n "$n" -dir "$work/big"
read -r pw pc pm < <(measure "$work/big" "$work/sysbox" plan -out p.plan)
echo "depchain n=$n sysbox plan -out: ${pw}s (cpu ${pc}s, rss ${pm}MB) target 1s ratio $(echo "scale=2; $pw / 1" | bc) (rss target 250MB)"
read -r vw vc vm < <(measure "$work/big" "$work/sysbox" validate)
echo "depchain n=$n sysbox validate: ${vw}s (cpu ${vc}s, rss ${vm}MB) target 0.5s ratio $(echo "scale=2; $vw / 0.5" | bc)"
peer=$(command -v terraform || command -v tofu || true)
if [ -z "$peer" ]; then
  echo "no terraform or tofu on PATH: side-by-side run skipped"
  exit 0
fi
mkdir -p "$work/small" "$work/tf"
"$work/gen" -shape depchain -n "$peer_n" -dir "$work/small"
"$work/gen" -terraform -n "$peer_n" -dir "$work/tf"
(cd "$work/tf" && "$peer" init -input=false >/dev/null 2>&1)
read -r sw sc sm < <(measure "$work/small" "$work/sysbox" plan -out p.plan)
runs=1 # the peer is slow: one run
read -r tw tc tm < <(measure "$work/tf" "$peer" plan -input=false -refresh=false -lock=false -out=tf.plan)
echo "depchain n=$peer_n sysbox plan -out: ${sw}s (cpu ${sc}s, rss ${sm}MB) $(basename "$peer") plan -out: ${tw}s (cpu ${tc}s, rss ${tm}MB, 1 run) ratio $(echo "scale=3; $sw / $tw" | bc)"
