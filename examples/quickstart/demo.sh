#!/usr/bin/env bash
# Quickstart demo: apply the lab with the real sysbox CLI, show the client reaching the server
# through the router (NAT) on TCP 8080, show 9090 and ping blocked by the server's firewall,
# reset the server (new generation, same IP and MAC), then destroy and audit.
# Needs root, Go (to build sysbox unless SYSBOX is set) and busybox-static.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root (network namespaces, bridges, nftables)" >&2; exit 1; }
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin
bb=$(command -v busybox || true)
if [ -z "$bb" ] || ! "$bb" httpd --help >/dev/null 2>&1; then
  echo "installing busybox-static (httpd, wget, ping inside the nodes)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
  bb=$(command -v busybox)
fi
sysbox=${SYSBOX:-}
if [ -z "$sysbox" ]; then
  sysbox=$(mktemp -d)/sysbox
  (cd "$top" && go build -o "$sysbox" ./cmd/sysbox)
fi
sb() { "$sysbox" --chdir "$here" "$@"; }
# Bold headings only on a terminal; piped or logged output stays plain.
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
fetch() { # node url [tries] → prints the first line or BLOCKED; each try bounded by timeout(1)
  local tries=${3:-1}
  for _ in $(seq 1 "$tries"); do
    if out=$(timeout 4 "$sysbox" --chdir "$here" exec "$1" -- "$bb" wget -q -O - "$2" 2>/dev/null); then
      printf '%s\n' "$out" | head -1
      return
    fi
    sleep 0.3 # listeners start asynchronously right after apply
  done
  echo "BLOCKED"
}
cleanup() { sb destroy -auto-approve -var "busybox=$bb" >/dev/null 2>&1 || true; }
trap cleanup EXIT

step "apply"
sb apply -auto-approve -var "busybox=$bb"

step "client → server:8080 through the router (allowed)"
got=$(fetch sysbox_node.client http://203.0.113.10:8080/copyright 10)
echo "$got"
[ "$got" != BLOCKED ] || { echo "FAIL: 8080 should be reachable"; exit 1; }

step "the server sees the router's address (masquerade)"
sb exec sysbox_node.server -- "$bb" netstat -tn | grep -E ':8080 .*203\.0\.113\.1:' | head -1 || true

step "client → server:9090 (blocked by the firewall)"
got=$(fetch sysbox_node.client http://203.0.113.10:9090/copyright)
echo "$got"
[ "$got" = BLOCKED ] || { echo "FAIL: 9090 should be blocked"; exit 1; }

step "client → ping server (blocked: default_input = drop)"
if sb exec sysbox_node.client -- "$bb" ping -c 1 -W 1 203.0.113.10 >/dev/null 2>&1; then
  echo "FAIL: ping should be blocked"; exit 1
fi
echo "no reply"

step "reset the server: new generation, same address and MAC"
before=$(sb state show sysbox_node.server --json | grep -o '"external_id": *"[^"]*"' | head -1)
sb reset sysbox_node.server -var "busybox=$bb"
after=$(sb state show sysbox_node.server --json | grep -o '"external_id": *"[^"]*"' | head -1)
echo "before: $before"; echo "after:  $after"
got=$(fetch sysbox_node.client http://203.0.113.10:8080/copyright 10)
[ "$got" != BLOCKED ] || { echo "FAIL: 8080 after reset"; exit 1; }
echo "8080 still answers after the reset"

step "refresh"
sb refresh -var "busybox=$bb"

step "destroy (ends with the residue audit)"
trap - EXIT
sb destroy -auto-approve -var "busybox=$bb"
echo
echo "demo: OK"
