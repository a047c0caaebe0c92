#!/usr/bin/env bash
# The same work as main.go with iproute2, the way a lab script does it: one bridge, N
# namespaces each with a veth into the bridge, an address, and `sleep infinity` inside; then
# tear down. Prints apply_s and destroy_s. Sequential, like most such scripts.
set -euo pipefail
n=${1:-100}
br=sbbench$$
pfx=sbb$$
now() { date +%s.%N; }
t0=$(now)
ip link add "$br" type bridge
ip link set "$br" up
for i in $(seq 0 $((n-1))); do
  ns=$pfx-$i
  ip netns add "$ns"
  ip link add "v$pfx$i" type veth peer name lan netns "$ns"
  ip link set "v$pfx$i" master "$br" up
  ip -n "$ns" addr add "198.19.$(( (i+10)/250 )).$(( (i+10)%250+1 ))/16" dev lan
  ip -n "$ns" link set lan up
  ip -n "$ns" link set lo up
  setsid ip netns exec "$ns" sleep infinity </dev/null >/dev/null 2>&1 &
  echo $! > "/tmp/$ns.pid"
done
t1=$(now)
for i in $(seq 0 $((n-1))); do
  ns=$pfx-$i
  kill "$(cat "/tmp/$ns.pid")" 2>/dev/null || true
  rm -f "/tmp/$ns.pid"
  ip link del "v$pfx$i"
  ip netns del "$ns"
done
ip link del "$br"
t2=$(now)
echo "ip-script nodes=$n apply_s=$(echo "$t1 - $t0" | bc) destroy_s=$(echo "$t2 - $t1" | bc)"
