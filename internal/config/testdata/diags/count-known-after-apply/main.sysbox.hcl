resource "sysbox_node" "a" {}
resource "sysbox_node" "b" {
  count = sysbox_node.a.generation
}
resource "sysbox_node" "c" {
  hostname = sysbox_node.a.external_id
}
resource "sysbox_node" "d" {
  for_each = toset([sysbox_node.a.external_id])
}
output "id" {
  value = sysbox_node.a.external_id # fine: outputs may be known after apply
}
