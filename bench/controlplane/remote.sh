#!/usr/bin/env bash
# Side-by-side: `sysbox apply` / `destroy` of N netns nodes (PER per network) with the local CLI
# and with --remote through the control plane (sysbox server on SQLite + one sysbox agent on
# loopback, both real processes), ROUNDS rounds alternating. Prints every round and the median
# overhead of the remote run (remote / local - 1; target < 10 %). The remote figure includes
# everything a user waits for: packing and storing the revision, queueing, the agent's claim
# (a long poll of up to POLL), the run's events streamed back (the CLI long-polls the event
# log), the per-resource projections and the completion. Needs root (real namespaces).
# SYSBOX=PATH uses a built binary instead of building this tree's.
#   N=20 ROUNDS=5 bench/controlplane/remote.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
n=${N:-20}
per=${PER:-10}
rounds=${ROUNDS:-3}
poll=${POLL:-10s}
work=$(mktemp -d)
pids=()
cleanup() {
  (cd "$work/local" && "$work/sysbox" destroy -auto-approve >/dev/null 2>&1) || true
  (cd "$work/remote" && SYSBOX_TOKEN=${token:-} "$work/sysbox" destroy -auto-approve --remote "${url:-}" >/dev/null 2>&1) || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${SYSBOX:-}" ]; then
  cp "$SYSBOX" "$work/sysbox"
else
  (cd "$here/../.." && go build -o "$work/sysbox" ./cmd/sysbox)
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$here/../netns/lab.sh" "$work/local" "$n" "$per"
"$here/../netns/lab.sh" "$work/remote" "$n" "$per"

"$work/sysbox" server --data "$work/server" --listen 127.0.0.1:0 >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^listening on ' "$work/server.log" && break; sleep 0.1; done
url=$(sed -n 's/^listening on //p' "$work/server.log")
admin=$(cat "$work/server/admin.token")
api() { curl -fsS -H "Authorization: Bearer $admin" -H 'Content-Type: application/json' "$@"; }
project=$(api -d '{"name":"bench"}' "$url/v1/projects" | jq -r .id)
token=$(api -d '{"kind":"project","name":"bench"}' "$url/v1/projects/$project/tokens" | jq -r .token)
join=$(api -d '{"kind":"join","name":"bench-agent"}' "$url/v1/projects/$project/tokens" | jq -r .token)
SYSBOX_JOIN_TOKEN=$join "$work/sysbox" agent --server "$url" --data "$work/agent" --name bench-agent --drivers netns --poll "$poll" >"$work/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^sysbox agent ' "$work/agent.log" && break; sleep 0.1; done

# timed DIR CMD...: runs CMD in DIR and prints its wall time in seconds.
timed() {
  local dir=$1 s e; shift
  s=$(date +%s.%N)
  (cd "$dir" && "$@" >/dev/null)
  e=$(date +%s.%N)
  echo "$e - $s" | bc
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
export SYSBOX_TOKEN=$token
oa=(); od=(); tla=(); tra=(); tld=(); trd=()
for r in $(seq 1 "$rounds"); do
  la=$(timed "$work/local" "$work/sysbox" apply -auto-approve)
  ld=$(timed "$work/local" "$work/sysbox" destroy -auto-approve)
  sleep 1 # let the kernel finish freeing namespaces
  ra=$(timed "$work/remote" "$work/sysbox" apply -auto-approve --remote "$url")
  rd=$(timed "$work/remote" "$work/sysbox" destroy -auto-approve --remote "$url")
  sleep 1
  tla+=("$la"); tra+=("$ra"); tld+=("$ld"); trd+=("$rd")
  oa+=("$(echo "scale=3; ($ra / $la - 1) * 100" | bc)")
  od+=("$(echo "scale=3; ($rd / $ld - 1) * 100" | bc)")
  echo "round $r nodes=$n apply: local ${la}s remote ${ra}s overhead ${oa[-1]}%; destroy: local ${ld}s remote ${rd}s overhead ${od[-1]}%"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
med() { printf '%s\n' "$@" | median; }
echo "median times apply: local $(med "${tla[@]}")s remote $(med "${tra[@]}")s; destroy: local $(med "${tld[@]}")s remote $(med "${trd[@]}")s"
echo "median overhead apply=$(printf '%s\n' "${oa[@]}" | median)% destroy=$(printf '%s\n' "${od[@]}" | median)% (remote vs local over $rounds rounds; target < 10%)"
