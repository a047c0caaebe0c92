# quickstart: a client, a router and a server on two networks, on the embedded netns driver.
#
#   client 198.51.100.10 ── lan ── 198.51.100.1 router 203.0.113.1 ── dmz ── 203.0.113.10 server
#
# The router forwards and masquerades lan → dmz; the server's firewall lets only TCP 8080 in
# (so its second listener on 9090 and ping are blocked). `./demo.sh` applies it, shows both,
# and destroys it.

substrate "local" {
  driver "netns" {}
  driver "nftables" {}
  backend "local" { path = ".sysbox/state" }
  parallelism = 4
}

variable "busybox" {
  type        = string
  default     = "/bin/busybox"
  description = "A static busybox (Debian: busybox-static) for httpd inside the server."
}

locals {
  lan = "198.51.100.0/24"
  dmz = "203.0.113.0/24"
}

resource "sysbox_network" "lan" {
  ipv4_cidr = local.lan
}

resource "sysbox_network" "dmz" {
  ipv4_cidr = local.dmz
}

resource "sysbox_node" "client" {
  driver   = "netns"
  hostname = "client"
  command  = ["sleep", "infinity"]

  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["${cidrhost(local.lan, 10)}/24"]
    gateway = cidrhost(local.lan, 1)
  }
}

resource "sysbox_node" "router" {
  driver   = "netns"
  hostname = "router"
  command  = ["sleep", "infinity"]

  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["${cidrhost(local.lan, 1)}/24"]
  }
  attachment "dmz" {
    network = sysbox_network.dmz
    ipv4    = ["${cidrhost(local.dmz, 1)}/24"]
  }
}

resource "sysbox_node" "server" {
  driver   = "netns"
  hostname = "server"
  # The main process: a web server on 8080 (in the foreground, so sysbox supervises it).
  command = [var.busybox, "httpd", "-f", "-p", "8080", "-h", "/usr/share/doc/busybox-static"]

  attachment "dmz" {
    network = sysbox_network.dmz
    ipv4    = ["${cidrhost(local.dmz, 10)}/24"]
    gateway = cidrhost(local.dmz, 1)
  }
  # A second listener the firewall must block. Idempotent: recovery may run it again.
  provisioner "exec" {
    command = ["/bin/sh", "-c", "${var.busybox} httpd -p 9090 -h /usr/share/doc/busybox-static || ${var.busybox} netstat -ltn | grep -q ':9090 '"]
  }
}

resource "sysbox_router" "edge" {
  node = sysbox_node.router
  masquerade {
    out_attachment = "dmz"
    source         = local.lan
  }
}

resource "sysbox_firewall" "server" {
  node            = sysbox_node.server
  default_input   = "drop"
  default_forward = "drop"

  rule {
    chain            = "input"
    action           = "accept"
    protocol         = "tcp"
    destination_port = 8080
    attachment       = "dmz"
  }
}

output "server_url" {
  value = "http://${cidrhost(local.dmz, 10)}:8080/"
}

output "server_netns" {
  value = sysbox_node.server.external_id
}
