#!/usr/bin/env bash
# fluxvm-upgrade demo on real pinned BPF maps (root, bpffs, bpftool).
#
#  1. creates three pinned maps under /sys/fs/bpf/fluxvm (demo_conntrack, demo_policy,
#     demo_stats) holding "old version" state, and the components' config files;
#  2. validate, probe and plan an upgrade;
#  3. runs it: the apply hooks re-create the maps empty, fluxvm-upgrade replays the declared
#     state (merge for flows, replace for rules, metadata-only for per-CPU stats) before health;
#  4. verifies the signed evidence with ssh-keygen;
#  5. runs a second upgrade whose health check fails: both components roll back in reverse
#     order, the config files and map entries come back exactly;
#  6. removes the demo maps (also on failure). The transaction directories stay in $WORK.
#
# usage: examples/fluxvm-upgrade/demo.sh [WORK_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
WORK=${1:-/tmp/fluxvm-upgrade-demo}
export PATH=/usr/local/go/bin:$PATH:/usr/sbin:/sbin

# Bold headings only on a terminal; piped or logged output stays plain.
if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
die() { printf 'demo: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (BPF maps)"
need=()
command -v bpftool >/dev/null || need+=(bpftool)
command -v ssh-keygen >/dev/null || need+=(openssh-client)
if [ ${#need[@]} -gt 0 ]; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf

pins=(/sys/fs/bpf/fluxvm/demo_conntrack /sys/fs/bpf/fluxvm/demo_policy /sys/fs/bpf/fluxvm/demo_stats)
cleanup() { rm -f "${pins[@]}"; rmdir /sys/fs/bpf/fluxvm 2>/dev/null || true; }
trap cleanup EXIT
cleanup

# Only ever delete a directory this demo made (it leaves a marker).
if [ -e "$WORK" ]; then
	[ -e "$WORK/.fluxvm-upgrade-demo" ] || die "$WORK exists and was not made by this demo; pass another WORK_DIR"
	rm -rf "$WORK"
fi
mkdir -p "$WORK/etc" "$WORK/keys" "$WORK/bin"
touch "$WORK/.fluxvm-upgrade-demo"
say "build fluxvm-upgrade"
(cd "$top" && go build -o "$WORK/bin/fluxvm-upgrade" ./cmd/fluxvm-upgrade)
fu="$WORK/bin/fluxvm-upgrade"

say "old version: pinned maps with state, config files"
mkdir -p /sys/fs/bpf/fluxvm
bpftool map create /sys/fs/bpf/fluxvm/demo_conntrack type hash key 4 value 8 entries 1024 name demo_ct
bpftool map create /sys/fs/bpf/fluxvm/demo_policy type hash key 4 value 4 entries 256 name demo_policy
bpftool map create /sys/fs/bpf/fluxvm/demo_stats type percpu_array key 4 value 8 entries 4 name demo_stats
for flow in 1 2 3; do
	bpftool map update pinned /sys/fs/bpf/fluxvm/demo_conntrack key "$flow" 0 0 0 value "$((flow * 10))" 0 0 0 0 0 0 0
done
for rule in 1 2; do
	bpftool map update pinned /sys/fs/bpf/fluxvm/demo_policy key "$rule" 0 0 0 value 1 0 0 0
done
printf 'version=2.0\nentries=1024\n' > "$WORK/etc/conntrack.conf"
printf 'version=2.0\n' > "$WORK/etc/policy.conf"
ssh-keygen -q -t ed25519 -N '' -C release@zyvor.dev -f "$WORK/keys/upgrade-signing-key"
echo "release@zyvor.dev namespaces=\"fluxvm-upgrade\" $(cat "$WORK/keys/upgrade-signing-key.pub")" > "$WORK/keys/allowed_signers"
bpftool map dump pinned /sys/fs/bpf/fluxvm/demo_conntrack | grep -c key | sed 's/^/conntrack flows: /'

render() { # tx version mode
	sed -e "s|@TX@|$1|g" -e "s|@VERSION@|$2|g" -e "s|@MODE@|$3|g" -e "s|@WORK@|$WORK|g" \
		-e "s|@HOOK@|$here/hooks/sentinel-hook.sh|g" "$here/plan.template.json" > "$WORK/$1.json"
	echo "$WORK/$1.json"
}

plan=$(render demo-upgrade-3.0 3.0 ok)
say "validate / probe / plan ($plan)"
"$fu" validate "$plan"
"$fu" probe "$plan"
"$fu" plan "$plan"

say "run"
"$fu" run "$plan"
"$fu" status "$plan"
echo "conntrack entries after upgrade (old flows 1-3 replayed, new flow 100 kept):"
bpftool map dump pinned /sys/fs/bpf/fluxvm/demo_conntrack | grep key
echo "policy rules after upgrade (stale rule 99 removed by replace):"
bpftool map dump pinned /sys/fs/bpf/fluxvm/demo_policy | grep key
echo "config: $(tr '\n' ' ' < "$WORK/etc/conntrack.conf")"

say "verify signed evidence"
"$fu" verify-evidence "$WORK/state/demo-upgrade-3.0" \
	--allowed-signers "$WORK/keys/allowed_signers" --identity release@zyvor.dev --namespace fluxvm-upgrade

say "a failing upgrade rolls back (policy health fails)"
plan2=$(render demo-upgrade-3.1 3.1 fail-health)
set +e
"$fu" run "$plan2"
code=$?
set -e
[ "$code" = 6 ] || die "expected exit code 6 (rolled-back), got $code"
"$fu" status "$plan2"
echo "config after rollback: $(tr '\n' ' ' < "$WORK/etc/conntrack.conf")"
[ "$(cat "$WORK/etc/conntrack.conf")" = "$(printf 'version=3.0\nentries=2048')" ] || die "conntrack.conf not restored"
[ ! -e "$WORK/etc/policy-3.1.features" ] || die "file created by the failed apply survived rollback"
echo "policy-3.1.features (created by the failed apply) is gone; policy-3.0.features stays"
echo "conntrack entries after rollback:"
bpftool map dump pinned /sys/fs/bpf/fluxvm/demo_conntrack | grep key
"$fu" verify-evidence "$WORK/state/demo-upgrade-3.1" \
	--allowed-signers "$WORK/keys/allowed_signers" --identity release@zyvor.dev --namespace fluxvm-upgrade

say "done: transactions in $WORK/state (demo maps removed)"
