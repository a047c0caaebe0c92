#!/usr/bin/env bash
# Times fluxvm-upgrade's pinned-map snapshot and restore of a 1,000,000-entry hash map (8-byte
# keys, 16-byte values) against `bpftool -j map dump` of the same map, in one run.
# Needs root. Installs bpftool (Debian package "bpftool") if missing and mounts bpffs if needed.
#   bench/bpfmap/run.sh [-entries N] [-runs R] [-json]
# RUN=1 bench/bpfmap/run.sh [-runs R] instead times whole `fluxvm-upgrade run`s (one component,
# the map re-created empty by its apply hook, policy merge) against `bpftool -j map dump` of the
# same map, one line per run (issue 16 target: ratio <= 0.25), with where the time went by the
# transaction journal. RUN=1 BASE=REV also builds fluxvm-upgrade at git revision REV and times it
# in the same runs, alternating with the working tree's build (before/after on one host state).
set -euo pipefail
cd "$(dirname "$0")/../.."
[ "$(id -u)" = 0 ] || { echo "run.sh: run as root (creates a pinned BPF map)" >&2; exit 1; }
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
command -v bpftool >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftool >/dev/null; }
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/bpfmap-bench" ./bench/bpfmap
if [ "${RUN:-}" = 1 ]; then
  go build -o "$bin/fluxvm-upgrade" ./cmd/fluxvm-upgrade
  set -- -fluxvm "$bin/fluxvm-upgrade" "$@"
  if [ -n "${BASE:-}" ]; then
    mkdir "$bin/base"
    git archive "$BASE" | tar -x -C "$bin/base"
    (cd "$bin/base" && go build -o "$bin/fluxvm-upgrade-base" ./cmd/fluxvm-upgrade)
    set -- -fluxvm-base "$bin/fluxvm-upgrade-base" "$@"
    echo "base: $(git rev-parse --short "$BASE"), new: working tree of $(git rev-parse --short HEAD)"
  fi
fi
echo "host: $(nproc) CPUs, kernel $(uname -r), $(bpftool version | head -1); $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
"$bin/bpfmap-bench" "$@"
echo "done: $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
