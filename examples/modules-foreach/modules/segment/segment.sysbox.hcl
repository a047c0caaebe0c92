# One lab segment: a network, `targets` nodes and a firewall on each.

variable "name" {
  type = string
}

variable "cidr" {
  type = string
  validation {
    condition     = can(cidrhost(var.cidr, 0))
    error_message = "cidr must be an IPv4 prefix such as 198.18.1.0/24."
  }
}

variable "targets" {
  type    = number
  default = 1
}

resource "sysbox_network" "net" {
  ipv4_cidr = var.cidr
}

resource "sysbox_node" "target" {
  count   = var.targets
  command = ["sleep", "infinity"]

  attachment "lan" {
    network = sysbox_network.net
    ipv4    = ["${cidrhost(var.cidr, 10 + count.index)}/24"]
    aliases = ["${var.name}-target${count.index}"]
  }
}

resource "sysbox_firewall" "target" {
  count         = var.targets
  node          = sysbox_node.target[count.index]
  default_input = "drop"
  rule {
    chain    = "input"
    action   = "accept"
    protocol = "tcp"
    source   = var.cidr
  }
}

output "network" {
  value = sysbox_network.net
}

output "cidr" {
  value = var.cidr
}

output "target_ips" {
  value = [for t in sysbox_node.target : t.attachment["lan"].ipv4[0]]
}
