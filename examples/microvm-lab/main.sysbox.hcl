# microvm-lab: two Firecracker microVMs on one LAN next to a netns node. Each microVM boots the
# same immutable rootfs baseline from its own sparse copy; the guest agent (sysbox-guest, over
# vsock) sets its address and runs `sysbox exec`. Needs `firecracker` on PATH, a KVM that boots
# guests, and the two artifacts below (see README.md); the tests run it with the contract-checking
# simulator.

substrate "local" {
  driver "netns" {}
  driver "firecracker" {}
  backend "local" { path = ".sysbox/state" }
}

variable "vms" {
  type        = number
  default     = 2
  description = "How many microVMs to start."
}

resource "sysbox_artifact" "rootfs" {
  driver = "firecracker"
  kind   = "rootfs"
  source = "images/rootfs.ext4"
}

resource "sysbox_artifact" "vmlinux" {
  driver = "firecracker"
  kind   = "kernel"
  source = "images/vmlinux"
}

resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}

resource "sysbox_node" "router" {
  driver  = "netns"
  command = ["sleep", "infinity"]
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.1/24"]
  }
}

resource "sysbox_node" "vm" {
  count     = var.vms
  driver    = "firecracker"
  artifact  = sysbox_artifact.rootfs
  kernel    = sysbox_artifact.vmlinux
  cpus      = 1
  memory_mb = 128
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.${10 + count.index}/24"]
    gateway = "198.51.100.1"
  }
}
