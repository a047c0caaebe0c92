resource "sysbox_node" "a" {
  depends_on = [sysbox_node.c]
}
resource "sysbox_node" "b" {
  depends_on = [sysbox_node.a]
}
resource "sysbox_node" "c" {
  hostname = "c-${sysbox_node.b.hostname == null ? "x" : "y"}"
}
