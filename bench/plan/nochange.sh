#!/usr/bin/env bash
# A no-change plan of the 1,000-node lab with its state (issue 16: < 0.3 s): the lab of
# bench/netns/cli.sh (bench/netns/lab.sh: N netns nodes, PER per network, count-expanded),
# applied once by a test build of sysbox against the in-memory fake driver standing in for netns (no root, no kernel
# objects; this setup is slow, minutes at 1,000, because the fake persists its whole world per
# change), then `sysbox plan` of a normal build, RUNS runs: median wall, CPU (user+system) and
# peak RSS, and the plan's summary line (it must say 0 to create/update/replace/delete).
#   N=1000 PER=10 RUNS=5 bench/plan/nochange.sh
# KEEP=DIR keeps the applied lab in DIR (and reuses it when DIR/lab exists).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/go/bin:$PATH
n=${N:-1000}
per=${PER:-10}
runs=${RUNS:-5}
work=${KEEP:-$(mktemp -d)}
[ -n "${KEEP:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
(cd "$here/../.." && go build -o "$work/sysbox" ./cmd/sysbox && go build -tags sysboxtest -o "$work/sysbox-fake" ./cmd/sysbox)
if [ ! -d "$work/lab" ]; then
  "$here/../netns/lab.sh" "$work/lab" "$n" "$per"
  (cd "$work/lab" && SYSBOX_TEST_FAKE_WORLD="$work/world.json" "$work/sysbox-fake" apply -auto-approve >/dev/null)
fi
summary=$(cd "$work/lab" && "$work/sysbox" plan | grep '^Plan:')
case "$summary" in
*" 0 to create, 0 to update, 0 to replace, 0 to delete"*) ;;
*) echo "not a no-change plan: $summary" >&2; exit 1 ;;
esac
median() { sort -n | awk '{a[NR]=$0} END {print a[int((NR+1)/2)]}'; }
t=$(mktemp)
for _ in $(seq 1 "$runs"); do
  (cd "$work/lab" && /usr/bin/time -f "%e %U %S %M" -o "$t.1" "$work/sysbox" plan >/dev/null)
  awk '{printf "%.3f %.2f %.0f\n", $1, $2 + $3, $4 / 1024}' "$t.1" >>"$t"
done
read -r w c m < <(median <"$t"); rm -f "$t" "$t.1"
echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); $runs runs, median"
echo "lab n=$n per=$per no-change sysbox plan: ${w}s (cpu ${c}s, rss ${m}MB) target 0.3s ratio $(echo "scale=2; $w / 0.3" | bc) ($summary)"
