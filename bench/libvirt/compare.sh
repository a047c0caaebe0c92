#!/usr/bin/env bash
# Compares the libvirt driver at BASE (a commit, default c68676d) with this tree's: builds this
# benchmark against both and runs them alternately (base, new; PAIRS times, default 1), one
# round each, under the shared kernel-test and benchmark locks. LINES picks the benchmark's
# lines (default boot,reset-cold,reset-snap; see main.go). Needs root and a running libvirtd.
set -euo pipefail
cd "$(dirname "$0")"
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
base=${BASE:-c68676d}
lines=${LINES:-boot,reset-cold,reset-snap}
img=${IMAGE:-/tmp/sysbox-test-all/guest-image}
../../scripts/guest-image "$img" >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/new" .
mkdir "$tmp/base"
git -C ../.. archive "$base" | tar -x -C "$tmp/base"
cp main.go steps.go "$tmp/base/bench/libvirt/"
if ! grep -q 'OnStep' "$tmp/base/drivers/libvirt/driver.go"; then
	# A driver without Options.OnStep: its calls are timed, not its steps.
	cat >"$tmp/base/bench/libvirt/steps.go" <<'EOF'
package main

import (
	"time"

	"zyvor.dev/sysbox/drivers/libvirt"
)

func withSteps(o libvirt.Options, _ func(addr, step string, took time.Duration)) libvirt.Options {
	return o
}
EOF
fi
(cd "$tmp/base/bench/libvirt" && go build -o "$tmp/base-bin" .)
flock -o /tmp/sysbox-tier.lock flock -o /tmp/sysbox-bench.lock bash -c '
	for i in $(seq "$1"); do
		for side in base new; do
			bin=$2/new
			[ "$side" = base ] && bin=$2/base-bin
			echo "== pair $i: $side ($3 vs this tree)"
			"$bin" -image "$4" -rounds 1 -lines "$5"
		done
	done' compare "${PAIRS:-1}" "$tmp" "$base" "$img" "$lines"
