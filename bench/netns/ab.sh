#!/usr/bin/env bash
# Before/after at one load: alternates two sysbox binaries on the cli.sh lab (no ip script),
# ROUNDS rounds of OLD then NEW, and prints per round and phase both wall times, both CPU times
# (user + system) and the ratios new / old. Needs root; run it under the kernel-test lock and
# the benchmark lock:
#   OLD=/tmp/sysbox-old NEW=/tmp/sysbox-new N=1000 PER=10 ROUNDS=2 bench/netns/ab.sh
# PROFILE=DIR keeps CPU profiles of every run (DIR/old-ROUND, DIR/new-ROUND).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
: "${OLD:?OLD=path of the old sysbox binary}" "${NEW:?NEW=path of the new sysbox binary}"
n=${N:-1000}
per=${PER:-10}
rounds=${ROUNDS:-2}
command -v bc >/dev/null || { apt-get update -qq && apt-get install -y -qq bc >/dev/null; }
# run WHICH BIN: one cli.sh round; prints "apply_wall apply_cpu destroy_wall destroy_cpu".
run() {
  local out prof=()
  [ -n "${PROFILE:-}" ] && { mkdir -p "$PROFILE/$1"; prof=(PROFILE="$PROFILE/$1"); }
  out=$(env "${prof[@]}" SYSBOX_BIN="$2" N="$n" PER="$per" ROUNDS=1 PEER=0 "$here/cli.sh" 2>/dev/null)
  echo "$out" | awk '/ apply: /{a=$7; ac=$9} / destroy: /{d=$7; dc=$9} END {gsub(/[^0-9.]/,"",a); gsub(/[^0-9.]/,"",ac); gsub(/[^0-9.]/,"",d); gsub(/[^0-9.]/,"",dc); print a, ac, d, dc}'
}
echo "ab nodes=$n per_network=$per start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  read -r oa oac od odc < <(run "old-$r" "$OLD")
  read -r na nac nd ndc < <(run "new-$r" "$NEW")
  echo "round $r nodes=$n apply: new ${na}s (cpu ${nac}s) old ${oa}s (cpu ${oac}s) ratio $(echo "scale=3; $na / $oa" | bc) cpu-ratio $(echo "scale=3; $nac / $oac" | bc)"
  echo "round $r nodes=$n destroy: new ${nd}s (cpu ${ndc}s) old ${od}s (cpu ${odc}s) ratio $(echo "scale=3; $nd / $od" | bc) cpu-ratio $(echo "scale=3; $ndc / $odc" | bc)"
done
echo "ab end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
