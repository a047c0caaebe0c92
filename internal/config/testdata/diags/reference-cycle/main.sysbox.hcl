locals {
  a = local.b
  b = local.a
}
resource "sysbox_network" "lan" {
  ipv4_cidr = local.a
}
