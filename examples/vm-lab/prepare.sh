#!/usr/bin/env bash
# Builds vm-lab's inputs from Debian packages (linux-image-amd64, busybox-static, e2fsprogs,
# qemu-utils, xz-utils, cpio) and this tree's guest agent: guest/ (scripts/guest-image: vmlinux,
# initrd.img, disk.qcow2 with cmd/sysbox-guest; a second run with the same inputs does nothing)
# and busybox-rootfs.tar.
set -euo pipefail
cd "$(dirname "$0")"
../../scripts/guest-image guest
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"; cp /bin/busybox "$tmp/bin/busybox"
for a in sh sleep ping ip cat; do ln -s busybox "$tmp/bin/$a"; done
tar -C "$tmp" -cf busybox-rootfs.tar .
