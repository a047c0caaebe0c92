#!/usr/bin/env bash
# Builds the guest image (cached by content) and runs the libvirt benchmark (see main.go) under
# the shared kernel-test lock. Needs root and a running libvirtd. ROUNDS (default 3); LINES picks
# lines (default all; see main.go).
set -euo pipefail
cd "$(dirname "$0")"
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
img=${IMAGE:-/tmp/sysbox-test-all/guest-image}
../../scripts/guest-image "$img" >/dev/null
bindir=$(mktemp -d)
trap 'rm -rf "$bindir"' EXIT
bin=$bindir/libvirt-bench
go build -o "$bin" .
flock -o /tmp/sysbox-tier.lock "$bin" -image "$img" -rounds "${ROUNDS:-3}" -lines "${LINES:-}"
