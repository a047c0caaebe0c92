resource "sysbox_network" "lan" {
  ipv4_cidr = local.missing
}
resource "sysbox_node" "a" {
  cpus = var.nope
  attachment "lan" {
    network = sysbox_network.wan
  }
}
output "x" {
  value = module.none.out
}
