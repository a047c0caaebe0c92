#!/usr/bin/env bash
# Times decode + graph + plan on generated topologies of 1,000, 10,000 and 50,000 resources in
# two shapes (a reference chain; 100 fan-out groups) and prints a table.
# Targets: 10,000 resources < 1 s on 2 cores; 10k/1k time ratio <= 12; linear to 50,000.
# Each case runs COUNT times (default 5; 50,000: 3) and the table shows the fastest run (the
# least disturbed by other work on the machine) and its CPU time (user+system, GC included).
# Usage: bench/plan/run.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")/../.."
count="${1:-5}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
echo "host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) (wall times suffer when the machine is shared)"
go test -run '^$' -bench 'DecodeGraphPlan/.*/(1000|10000)$' -benchtime 1x -count "$count" ./bench/plan/ >>"$out"
go test -run '^$' -bench 'DecodeGraphPlan/.*/50000$' -benchtime 1x -count "$(( count < 3 ? count : 3 ))" -timeout 60m ./bench/plan/ >>"$out"
echo "after: load average $(cut -d' ' -f1-3 /proc/loadavg)"
awk '
/^BenchmarkDecodeGraphPlan\// {
  split($1, p, "/"); shape = p[2]; n = p[3]; sub(/-[0-9]+$/, "", n)
  w = ""; c = ""
  for (i = 2; i <= NF; i++) {
    if ($(i) == "ns/op") w = $(i-1) / 1e6
    if ($(i) == "cpu-ms/op") c = $(i-1)
  }
  if (!((shape, n) in wall) || w < wall[shape, n]) { wall[shape, n] = w; cpu[shape, n] = c }
  shapes[shape] = 1
}
END {
  printf "%-7s %9s %12s %12s %12s %14s\n", "shape", "resources", "wall ms", "cpu ms", "wall us/res", "ratio"
  for (s in shapes) {
    split("1000 10000 50000", ns, " ")
    for (k = 1; k <= 3; k++) {
      n = ns[k]
      if (!((s, n) in wall)) continue
      ratio = ""
      if (n == 10000 && (s, 1000) in wall) ratio = sprintf("10k/1k %.1f", wall[s, n] / wall[s, 1000])
      if (n == 50000 && (s, 10000) in wall) ratio = sprintf("50k/10k %.1f", wall[s, n] / wall[s, 10000])
      printf "%-7s %9d %12.0f %12.0f %12.1f %14s\n", s, n, wall[s, n], cpu[s, n], wall[s, n] * 1000 / n, ratio
    }
  }
}' "$out"
