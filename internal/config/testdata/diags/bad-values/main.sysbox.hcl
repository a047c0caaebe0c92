variable "n" {
  type    = number
  default = 0
  validation {
    condition     = var.n > 0
    error_message = "n must be positive."
  }
}
resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.7/24"
  mtu       = 10
}
resource "sysbox_network" "ok" {
  ipv4_cidr = "198.51.100.0/24"
}
resource "sysbox_node" "a" {
  driver = "vmware"
  cpus   = -1
  attachment "lan" {
    network = sysbox_network.ok
    ipv4    = ["203.0.113.5/24"]
    mac     = "01:00:5e:00:00:01"
  }
  route {
    to  = "192.0.2.0/24"
    via = "not-an-ip"
  }
}
resource "sysbox_thing" "x" {}
resource "sysbox_node" "a" {}
resource "sysbox_node" "d" {
  count    = 1
  for_each = toset(["a"])
}
