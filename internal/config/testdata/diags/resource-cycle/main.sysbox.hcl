resource "sysbox_node" "a" {
  hostname = sysbox_node.b.hostname
}
resource "sysbox_node" "b" {
  hostname = sysbox_node.a.hostname
}
