#!/usr/bin/env bash
# Side-by-side, end to end: `sysbox apply` / `sysbox destroy` of N docker containers on NETS
# networks (each container attached to one; planning, checkpoints, state saves and the residue
# audit included) against the docker CLI doing the container part alone: a PAR-way parallel
# `docker run -d --init --network none` loop of the same image, and one `docker rm -f` of all of
# them. dockerd is the floor (issue 16 targets: apply <= 1.0x the parallel loop while also wiring
# the networks, destroy <= 1.0x the single rm -f). ROUNDS rounds; each prints one line per phase:
# ours (wall, CPU = user+system of the sysbox process, peak RSS), the peer's wall time, the ratio.
# Needs root, dockerd, the docker CLI and /bin/busybox (busybox-static).
#   N=100 NETS=5 PAR=8 ROUNDS=1 bench/docker/cli.sh
# SYSBOX_BIN=PATH measures that binary instead of building this tree's; SYSBOX_FLAGS adds flags
# to its apply and destroy (e.g. SYSBOX_FLAGS="-parallelism 16"). BASE_BIN=PATH (a binary built
# from the commit to compare with) alternates: each round measures it ("base" lines) and then
# this tree's or SYSBOX_BIN's ("new" lines), each with its own peer run, so that both see the
# same load; the last line gives the medians of the destroy ratios.
# CALLS=1 sends both sides through bench/docker/apicount, a counting proxy of the Engine API
# (DOCKER_HOST for sysbox and the docker CLI alike), and after each phase prints its API calls per
# container and the calls by route; the timings then include the proxy.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
n=${N:-100}
nets=${NETS:-5}
par=${PAR:-8}
rounds=${ROUNDS:-1}
calls=${CALLS:-0}
docker version >/dev/null 2>&1 || { echo "dockerd is not running" >&2; exit 1; }
command -v bc >/dev/null || { echo "cli.sh: needs bc" >&2; exit 1; }
work=$(mktemp -d)
tag=sysbox-bench-$$:latest
proxy=
cleanup() {
  (cd "$work/lab" && "$work/sysbox" destroy -auto-approve >/dev/null 2>&1) || true
  [ -s "$work/ids" ] && xargs -r docker rm -f <"$work/ids" >/dev/null 2>&1 || true
  docker rmi -f "$tag" >/dev/null 2>&1 || true
  if [ -n "$proxy" ]; then kill "$proxy" 2>/dev/null || true; wait "$proxy" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "${SYSBOX_BIN:-}" ]; then cp "$SYSBOX_BIN" "$work/sysbox"; else (cd "$here/../.." && go build -o "$work/sysbox" ./cmd/sysbox); fi
bins=sysbox
if [ -n "${BASE_BIN:-}" ]; then cp "$BASE_BIN" "$work/sysbox-base"; bins="sysbox-base sysbox"; fi
seen=0
if [ "$calls" = 1 ]; then
  (cd "$here/../.." && go build -o "$work/apicount" ./bench/docker/apicount)
  "$work/apicount" -listen "$work/api.sock" -log "$work/api.log" &
  proxy=$!
  for _ in $(seq 1 100); do [ -S "$work/api.sock" ] && break; sleep 0.1; done
  [ -S "$work/api.sock" ] || { echo "cli.sh: the API proxy did not start" >&2; exit 1; }
  export DOCKER_HOST="unix://$work/api.sock"
fi
# daemon_cpu: CPU seconds (user+system) dockerd has used so far.
daemon_cpu() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$(cat /var/run/docker.pid)/stat"; }
dcpu0=
# calls_of PHASE: with CALLS=1, the API calls since the previous phase, per container and by
# route, and the CPU dockerd used meanwhile (its own process; containerd, shims and runc aside).
calls_of() {
  [ "$calls" = 1 ] || return 0
  local total dcpu; total=$(wc -l <"$work/api.log") dcpu=$(daemon_cpu)
  sed -n "$((seen + 1)),${total}p" "$work/api.log" >"$work/phase.log"
  seen=$total
  echo "round $r $1 API calls: $(awk -v n="$n" 'END { printf "%.2f", NR / n }' "$work/phase.log") per container, dockerd cpu $(echo "$dcpu - $dcpu0" | bc)s"
  "$work/apicount" -sum "$work/phase.log" | sed 's/^/    /'
  dcpu0=$(daemon_cpu)
}

# The image: a busybox rootfs, as examples/vm-lab/prepare.sh builds it.
mkdir -p "$work/rootfs/bin" "$work/lab"
cp /bin/busybox "$work/rootfs/bin/busybox"
for a in sh sleep; do ln -s busybox "$work/rootfs/bin/$a"; done
tar -C "$work/rootfs" -cf "$work/lab/rootfs.tar" .
docker import "$work/lab/rootfs.tar" "$tag" >/dev/null

cat >"$work/lab/main.sysbox.hcl" <<HCL
substrate "local" {
  driver "netns" {}  # the networks are host bridges (the netns driver's); containers attach to them
  driver "docker" {}
  backend "local" { path = ".sysbox/state" }
}
resource "sysbox_artifact" "busybox" {
  kind   = "rootfs"
  source = "rootfs.tar"
}
resource "sysbox_network" "lan" {
  count     = $nets
  ipv4_cidr = cidrsubnet("198.18.0.0/15", 9, count.index)
}
resource "sysbox_node" "c" {
  count    = $n
  driver   = "docker"
  artifact = sysbox_artifact.busybox
  command  = ["sleep", "3600"]
  attachment "lan" {
    network = sysbox_network.lan[count.index % $nets]
    ipv4    = ["\${cidrhost(cidrsubnet("198.18.0.0/15", 9, count.index % $nets), 2 + floor(count.index / $nets))}/24"]
  }
}
HCL

# timed CMD...: runs CMD under GNU time; prints "wall cpu rss_mb".
timed() {
  local t; t=$(mktemp)
  /usr/bin/time -f "%e %U %S %M" -o "$t" "$@" >/dev/null
  awk '{printf "%.2f %.2f %.0f\n", $1, $2 + $3, $4 / 1024}' "$t"; rm -f "$t"
}
now() { date +%s.%N; }
cd "$work/lab"
if [ "$calls" = 1 ]; then seen=$(wc -l <"$work/api.log") dcpu0=$(daemon_cpu); fi  # the image import is not a phase
for r in $(seq 1 "$rounds"); do
 for bin in $bins; do
  label=; [ -n "${BASE_BIN:-}" ] && { [ "$bin" = sysbox ] && label="new  " || label="base "; }
  read -r aw ac am < <(timed "$work/$bin" apply -auto-approve ${SYSBOX_FLAGS:-})
  calls_of "apply: sysbox"
  read -r dw dc dm < <(timed "$work/$bin" destroy -auto-approve ${SYSBOX_FLAGS:-})
  calls_of "destroy: sysbox"
  t0=$(now)
  seq 1 "$n" | xargs -P "$par" -I{} docker run -d --init --network none "$tag" sleep 3600 >"$work/ids"
  t1=$(now)
  calls_of "apply: docker-run-x$par"
  t1b=$(now)
  xargs docker rm -f <"$work/ids" >/dev/null
  t2=$(now)
  calls_of "destroy: docker-rm-f-all"
  : >"$work/ids"
  pa=$(echo "$t1 - $t0" | bc) pd=$(echo "$t2 - $t1b" | bc)
  dr=$(echo "scale=3; $dw / $pd" | bc)
  echo "$dr" >>"$work/ratios.$bin"
  echo "${label}round $r containers=$n networks=$nets apply: sysbox ${aw}s (cpu ${ac}s, rss ${am}MB) docker-run-x$par $(printf %.2f "$pa")s ratio $(echo "scale=3; $aw / $pa" | bc)"
  echo "${label}round $r containers=$n networks=$nets destroy: sysbox ${dw}s (cpu ${dc}s, rss ${dm}MB) docker-rm-f-all $(printf %.2f "$pd")s ratio $dr load $(cut -d' ' -f1 /proc/loadavg)"
 done
done
# median FILE: the median of the numbers in FILE, one a line.
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
if [ -n "${BASE_BIN:-}" ]; then
  echo "medians of $rounds destroy ratios: base $(median "$work/ratios.sysbox-base") new $(median "$work/ratios.sysbox")"
fi
