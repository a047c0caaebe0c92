#!/usr/bin/env bash
# Builds vm-lab's inputs from Debian packages (linux-image-amd64, busybox-static,
# qemu-guest-agent, qemu-utils): guest/{vmlinux,initrd.img,disk.qcow2} and busybox-rootfs.tar.
set -euo pipefail
cd "$(dirname "$0")"
../../drivers/libvirt/testdata/qga-image.sh guest
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"; cp /bin/busybox "$tmp/bin/busybox"
for a in sh sleep ping ip cat; do ln -s busybox "$tmp/bin/$a"; done
tar -C "$tmp" -cf busybox-rootfs.tar .
