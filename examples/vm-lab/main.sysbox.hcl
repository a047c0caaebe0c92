# vm-lab: a libvirt/QEMU VM, a netns node and a Docker container on one sysbox network.
# Build the inputs first (guest kernel + initramfs + disk, busybox rootfs): ./prepare.sh

substrate "local" {
  driver "netns" {}
  driver "docker" {}
  driver "libvirt" {}
  driver "nftables" {}
  backend "local" { path = ".sysbox/state" }
  parallelism = 4
}

locals {
  lan = "198.51.100.0/24"
}

resource "sysbox_artifact" "disk" {
  driver = "libvirt"
  kind   = "qcow2"
  source = "guest/disk.qcow2"
}

resource "sysbox_artifact" "kernel" {
  driver = "libvirt"
  kind   = "kernel"
  source = "guest" # vmlinux + initrd.img
}

resource "sysbox_artifact" "busybox" {
  kind   = "rootfs"
  source = "busybox-rootfs.tar"
}

resource "sysbox_network" "lan" {
  ipv4_cidr = local.lan
}

# A VM: each generation boots from its own overlay of the disk baseline; exec and the guest's
# network go through its QEMU guest agent.
resource "sysbox_node" "vm" {
  driver    = "libvirt"
  artifact  = sysbox_artifact.disk
  kernel    = sysbox_artifact.kernel
  memory_mb = 256
  command   = ["console=ttyS0", "panic=-1", "quiet"] # the kernel command line
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["${cidrhost(local.lan, 10)}/24"]
  }
}

resource "sysbox_node" "probe" {
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["${cidrhost(local.lan, 20)}/24"]
  }
}

resource "sysbox_node" "ctr" {
  driver   = "docker"
  artifact = sysbox_artifact.busybox
  command  = ["sleep", "3600"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["${cidrhost(local.lan, 30)}/24"]
  }
}

# The probe only answers the VM's pings (nftables inside the netns node).
resource "sysbox_firewall" "probe" {
  node          = sysbox_node.probe
  default_input = "drop"
  rule {
    chain    = "input"
    action   = "accept"
    protocol = "icmp"
    source   = "${cidrhost(local.lan, 10)}/32"
  }
}
