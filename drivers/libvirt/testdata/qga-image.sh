#!/usr/bin/env bash
# Builds a tiny test guest for the libvirt driver's VM tests from Debian packages only
# (linux-image-amd64, busybox-static, qemu-guest-agent, qemu-utils) into OUT:
#   OUT/vmlinux     Debian's kernel as an ELF vmlinux (the XZ payload of its bzImage, which boots
#                   about twice as fast under TCG as the bzImage)
#   OUT/initrd.img  busybox + virtio modules + Debian's qemu-ga with its libraries; the initramfs
#                   is the guest's root filesystem, its /init starts qemu-ga on the agent port
#   OUT/disk.qcow2  an empty 16 MiB disk (the overlay chain is exercised; the guest ignores it)
# It runs in about a second. Usage: qga-image.sh OUT
set -euo pipefail
out=$1
kernel=$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -1)
[ -n "$kernel" ] || { echo "qga-image: no /boot/vmlinuz-* (apt-get install linux-image-amd64)" >&2; exit 1; }
kver=${kernel#/boot/vmlinuz-}
moddir=/lib/modules/$kver
for f in /bin/busybox /usr/sbin/qemu-ga "$moddir"; do
  [ -e "$f" ] || { echo "qga-image: missing $f (busybox-static, qemu-guest-agent, linux-image-amd64)" >&2; exit 1; }
done
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
mkdir -p "$root"/{bin,sbin,proc,sys,dev,run,tmp,lib/modules,etc}
cp /bin/busybox "$root/bin/busybox"
cp /usr/sbin/qemu-ga "$root/bin/qemu-ga"
# qemu-ga's shared libraries at the paths the loader looks for them.
for lib in $(ldd /usr/sbin/qemu-ga | grep -o '/[^ ]*'); do
  mkdir -p "$root$(dirname "$lib")"; cp -L "$lib" "$root$lib"
done
# virtio modules in dependency order (they are modules in Debian's kernel).
mods="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci failover net_failover virtio_net virtio_console"
for m in $mods; do
  f=$(find "$moddir/kernel" -name "$m.ko*" | head -1)
  [ -n "$f" ] || { echo "qga-image: module $m not found under $moddir" >&2; exit 1; }
  case $f in
    *.xz) xz -dc "$f" >"$root/lib/modules/$m.ko" ;;
    *) cp "$f" "$root/lib/modules/$m.ko" ;;
  esac
done
cat >"$root/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /run
for m in $mods; do insmod /lib/modules/\$m.ko || echo "init: insmod \$m failed"; done
ip link set lo up
hostname sysbox-guest
port=
for i in 1 2 3 4 5 6 7 8 9 10; do
  for p in /sys/class/virtio-ports/*; do
    [ "\$(cat \$p/name 2>/dev/null)" = org.qemu.guest_agent.0 ] && port=/dev/\${p##*/}
  done
  [ -n "\$port" ] && [ -e "\$port" ] && break
  sleep 0.2
done
echo "init: guest agent port \$port"
qemu-ga -m virtio-serial -p "\$port" -f /run/qga.pid -t /run &
echo "init: sysbox test guest up"
while :; do sleep 3600; done
INIT
chmod 0755 "$root/init"
mkdir -p "$out"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initrd.img"
# The payload starts at the XZ magic; xz complains about the bzImage's trailing bytes, which
# is expected: the ELF header check below is what counts.
off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$kernel" | head -1 | cut -d: -f1 || true)
[ -n "$off" ] || { echo "qga-image: $kernel has no XZ payload" >&2; exit 1; }
tail -c +$((off + 1)) "$kernel" | xz -dc >"$tmp/vmlinux" 2>/dev/null || true
[ "$(head -c 4 "$tmp/vmlinux" | od -An -c | tr -d ' ')" = '177ELF' ] || { echo "qga-image: no ELF vmlinux in $kernel" >&2; exit 1; }
qemu-img create -q -f qcow2 "$tmp/disk.qcow2" 16M
for f in vmlinux initrd.img disk.qcow2; do mv "$tmp/$f" "$out/$f"; done
chmod 0644 "$out"/*
