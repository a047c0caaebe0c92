#!/usr/bin/env bash
# Times fluxvm-upgrade's pinned-map snapshot and restore of a 1,000,000-entry hash map (8-byte
# keys, 16-byte values) against `bpftool -j map dump` of the same map, in one run.
# Needs root. Installs bpftool (Debian package "bpftool") if missing and mounts bpffs if needed.
#   bench/bpfmap/run.sh [-entries N] [-runs R] [-json]
# RUN=1 bench/bpfmap/run.sh [-runs R] instead times whole `fluxvm-upgrade run`s (one component,
# the map re-created empty by its apply hook, policy merge) against `bpftool -j map dump` of the
# same map, one line per run (issue 16 target: ratio <= 0.25).
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
fi
echo "host: $(nproc) CPUs, kernel $(uname -r), $(bpftool version | head -1)"
"$bin/bpfmap-bench" "$@"
