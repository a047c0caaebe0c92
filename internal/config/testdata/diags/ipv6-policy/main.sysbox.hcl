resource "sysbox_network" "v6" {
  ipv4_cidr = "2001:db8::/64"
}
resource "sysbox_network" "lan" {
  ipv4_cidr = "198.51.100.0/24"
}
resource "sysbox_node" "n" {
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["2001:db8::10/64"]
    gateway = "2001:db8::1"
  }
  route {
    to  = "::/0"
    via = "2001:db8::1"
  }
}
resource "sysbox_node" "gw" {
  attachment "lan" {
    network = sysbox_network.lan
    ipv4    = ["198.51.100.1/24"]
  }
}
resource "sysbox_firewall" "f" {
  node = sysbox_node.gw
  rule {
    chain  = "input"
    action = "accept"
    source = "2001:db8::/32"
  }
  rule {
    chain       = "forward"
    action      = "accept"
    protocol    = "tcp"
    destination = "fe80::1"
    attachment  = "wan"
  }
}
resource "sysbox_router" "r" {
  node = sysbox_node.gw
  masquerade {
    out_attachment = "wan"
    source         = "2001:db8::/32"
  }
  port_forward {
    in_attachment = "lan"
    protocol      = "sctp"
    port          = 70000
    to            = "[2001:db8::1]:80"
  }
}
