# lab-small: one LAN, a gateway that routes and NATs to a WAN, two web targets behind a
# firewall. Runs on the embedded netns driver: `sysbox plan` here needs no daemon.

substrate "local" {
  driver "netns" {}
  driver "nftables" {}
  backend "local" { path = ".sysbox/state" }
  parallelism = 4
}

variable "targets" {
  type        = number
  default     = 2
  description = "How many web targets to start."
  validation {
    condition     = var.targets > 0 && var.targets <= 50
    error_message = "targets must be between 1 and 50."
  }
}

locals {
  lan = "198.51.100.0/24"
  wan = "203.0.113.0/24"
}

resource "sysbox_network" "lan" {
  ipv4_cidr = local.lan
}

resource "sysbox_network" "wan" {
  ipv4_cidr = local.wan
  mtu       = 1500
}

resource "sysbox_node" "gw" {
  driver  = "netns"
  command = ["sleep", "infinity"]

  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["${cidrhost(local.lan, 1)}/24"]
  }
  attachment "wan" {
    network = sysbox_network.wan
    ipv4    = ["${cidrhost(local.wan, 2)}/24"]
  }
}

resource "sysbox_router" "edge" {
  node = sysbox_node.gw
  masquerade {
    out_attachment = "wan"
    source         = local.lan
  }
  port_forward {
    in_attachment = "wan"
    protocol      = "tcp"
    port          = 8080
    to            = "${cidrhost(local.lan, 10)}:80"
  }
}

resource "sysbox_node" "web" {
  count   = var.targets
  command = ["sleep", "infinity"]
  environment = {
    ROLE  = "web"
    TOKEN = env("WEB_TOKEN") # stored as secret://env/WEB_TOKEN, read only at apply
  }

  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["${cidrhost(local.lan, 10 + count.index)}/24"]
    gateway = cidrhost(local.lan, 1)
    aliases = ["web${count.index}"]
  }
  route {
    to  = "0.0.0.0/0"
    via = cidrhost(local.lan, 1)
  }
  provisioner "exec" {
    command = ["sh", "-c", "echo ready > /tmp/ready"]
  }
}

resource "sysbox_firewall" "web" {
  count           = var.targets
  node            = sysbox_node.web[count.index]
  default_input   = "drop"
  default_forward = "drop"

  rule {
    chain            = "input"
    action           = "accept"
    protocol         = "tcp"
    source           = local.lan
    destination_port = 80
    attachment       = "lan"
  }
  rule {
    chain    = "input"
    action   = "accept"
    protocol = "icmp"
  }
}

output "web_ips" {
  value = [for n in sysbox_node.web : n.attachment["lan"].ipv4[0]]
}

output "gateway_id" {
  value = sysbox_node.gw.external_id # known after apply
}
