#!/usr/bin/env bash
# Times decode + graph + plan on generated topologies of 1,000, 10,000 and 50,000 resources in
# two shapes (a reference chain; 100 fan-out groups) and prints a table.
# Targets: 10,000 resources < 1 s on 2 cores; 10k/1k time ratio <= 12; linear to 50,000.
# Usage: bench/plan/run.sh [benchtime]   (default 3x; 50,000 always runs 2x)
set -euo pipefail
cd "$(dirname "$0")/../.."
bt="${1:-3x}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) (wall times suffer when the machine is shared)"
go test -run '^$' -bench 'DecodeGraphPlan/.*/(1000|10000)$' -benchtime "$bt" ./bench/plan/ | tee -a "$out" >/dev/null
go test -run '^$' -bench 'DecodeGraphPlan/.*/50000$' -benchtime 2x -timeout 30m ./bench/plan/ | tee -a "$out" >/dev/null
awk '
/^BenchmarkDecodeGraphPlan\// {
  split($1, p, "/"); shape = p[2]; n = p[3]; sub(/-[0-9]+$/, "", n)
  for (i = 2; i <= NF; i++) {
    if ($(i) == "ns/op") wall[shape, n] = $(i-1) / 1e6
    if ($(i) == "cpu-ms/op") cpu[shape, n] = $(i-1)
  }
  shapes[shape] = 1
}
END {
  printf "%-7s %9s %12s %12s %14s %12s\n", "shape", "resources", "wall ms/op", "cpu ms/op", "wall us/res", "ratio"
  for (s in shapes) {
    split("1000 10000 50000", ns, " ")
    for (k = 1; k <= 3; k++) {
      n = ns[k]
      if (!((s, n) in wall)) continue
      ratio = ""
      if (n == 10000 && (s, 1000) in wall) ratio = sprintf("10k/1k %.1f", wall[s, n] / wall[s, 1000])
      if (n == 50000 && (s, 10000) in wall) ratio = sprintf("50k/10k %.1f", wall[s, n] / wall[s, 10000])
      printf "%-7s %9d %12.0f %12.0f %14.1f %12s\n", s, n, wall[s, n], cpu[s, n], wall[s, n] * 1000 / n, ratio
    }
  }
}' "$out"
