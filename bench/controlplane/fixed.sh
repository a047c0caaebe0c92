#!/usr/bin/env bash
# The control plane's fixed cost per command, without the lab's own work: `sysbox state list`
# of an empty workspace, locally and with --remote (server on SQLite + one agent, real
# processes on loopback), ROUNDS times alternating; prints the median wall times and their
# difference. Needs no root (nothing touches the host). SYSBOX=PATH uses a built binary.
#   ROUNDS=15 bench/controlplane/fixed.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/go/bin:$PATH
rounds=${ROUNDS:-15}
poll=${POLL:-10s}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${SYSBOX:-}" ]; then cp "$SYSBOX" "$work/sysbox"; else (cd "$here/../.." && go build -o "$work/sysbox" ./cmd/sysbox); fi
"$here/../netns/lab.sh" "$work/lab" 20 10
"$work/sysbox" server --data "$work/server" --listen 127.0.0.1:0 >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^listening on ' "$work/server.log" && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$work/server.log")
SYSBOX_JOIN_TOKEN=$(cat "$work/server/join.token") "$work/sysbox" agent --server "$url" --data "$work/agent" --name fixed --drivers netns --poll "$poll" >"$work/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^sysbox agent ' "$work/agent.log" && break; sleep 0.1; done
export SYSBOX_TOKEN; SYSBOX_TOKEN=$(cat "$work/server/project.token")
timed() { local s e; s=$(date +%s.%N); (cd "$work/lab" && "$@" >/dev/null); e=$(date +%s.%N); echo "$e - $s" | bc; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
l=(); r=()
for _ in $(seq 1 "$rounds"); do
  l+=("$(timed "$work/sysbox" state list)")
  r+=("$(timed "$work/sysbox" state list --remote "$url")")
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
ml=$(printf '%s\n' "${l[@]}" | median); mr=$(printf '%s\n' "${r[@]}" | median)
echo "state list over $rounds rounds: median local ${ml}s remote ${mr}s; the control plane adds $(echo "($mr - $ml) * 1000" | bc)ms"
