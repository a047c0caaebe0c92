#!/bin/sh
# Example component hook for fluxvm-upgrade: one script for every step of a component, told
# which by FLUXVM_STEP (fluxvm-upgrade also sets FLUXVM_COMPONENT, FLUXVM_TRANSACTION_ID,
# FLUXVM_SNAPSHOT_DIR, FLUXVM_BPFFS_ROOT, ...). Run directly from the plan's argv, no shell
# expansion of the plan itself.
#
# usage: sentinel-hook.sh CONFIG_DIR VERSION [fail-health]
#
# apply "upgrades" the component the way a real datapath release does: writes the new config
# and re-creates its pinned maps empty (here with a larger max_entries), then the new datapath
# starts writing entries. fluxvm-upgrade then replays the declared map state into the new maps.
set -eu
conf=$1 version=$2 mode=${3:-ok}
c=$FLUXVM_COMPONENT
root=$FLUXVM_BPFFS_ROOT
log() { printf '%s %s/%s: %s\n' "$(date -u +%H:%M:%S)" "$c" "$FLUXVM_STEP" "$*"; }

recreate() { # pin type key value entries name
	rm -f "$1"
	bpftool map create "$1" type "$2" key "$3" value "$4" entries "$5" name "$6"
}

case "$c/$FLUXVM_STEP" in
*/preflight)
	command -v bpftool >/dev/null || { log "bpftool missing"; exit 1; }
	[ -f "$conf/$c.conf" ] || { log "no durable config $conf/$c.conf: cannot reproduce enforcement"; exit 1; }
	log "ok: config present, upgrading to $version"
	;;
conntrack/apply)
	printf 'version=%s\nentries=2048\n' "$version" > "$conf/$c.conf"
	recreate "$root/fluxvm/demo_conntrack" hash 4 8 2048 demo_ct
	# the new datapath tracks a new flow right away
	bpftool map update pinned "$root/fluxvm/demo_conntrack" key 100 0 0 0 value 1 0 0 0 0 0 0 0
	log "installed $version, maps re-created"
	;;
policy/apply)
	printf 'version=%s\n' "$version" > "$conf/$c.conf"
	echo "feature flags for $version" > "$conf/$c-$version.features"
	recreate "$root/fluxvm/demo_policy" hash 4 4 256 demo_policy
	recreate "$root/fluxvm/demo_stats" percpu_array 4 8 4 demo_stats
	# a stale rule the old policy did not have; "replace" removes it when replaying the snapshot
	bpftool map update pinned "$root/fluxvm/demo_policy" key 99 0 0 0 value 0 0 0 0
	log "installed $version, maps re-created"
	;;
conntrack/health|conntrack/rollback-health)
	bpftool map lookup pinned "$root/fluxvm/demo_conntrack" key 1 0 0 0 >/dev/null || { log "flow 1 lost"; exit 1; }
	log "flow 1 present"
	;;
policy/health|policy/rollback-health)
	bpftool map lookup pinned "$root/fluxvm/demo_policy" key 1 0 0 0 >/dev/null || { log "rule 1 missing"; exit 1; }
	if [ "$FLUXVM_STEP" = health ] && [ "$mode" = fail-health ]; then
		log "enforcement check failed (simulated)"
		exit 1
	fi
	log "rules enforced"
	;;
conntrack/rollback)
	# re-create the old version's (empty) map; fluxvm-upgrade restores files and entries after
	recreate "$root/fluxvm/demo_conntrack" hash 4 8 1024 demo_ct
	log "old datapath back"
	;;
policy/rollback)
	recreate "$root/fluxvm/demo_policy" hash 4 4 256 demo_policy
	recreate "$root/fluxvm/demo_stats" percpu_array 4 8 4 demo_stats
	log "old datapath back"
	;;
*)
	log "unknown step"; exit 2 ;;
esac
