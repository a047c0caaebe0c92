resource "sysbox_node" "bar" {
  count = 2
}
data "sysbox_artifact" "img" {
  kind   = "rootfs"
  source = "./main.sysbox.hcl"
}
module "m" {
  source = "./modules/m"
}
resource "sysbox_node" "attr" {
  depends_on = [sysbox_node.bar.hostname]
}
resource "sysbox_node" "attr_of_instance" {
  depends_on = [sysbox_node.bar[0].hostname]
}
resource "sysbox_node" "module_output" {
  depends_on = [module.m.out]
}
resource "sysbox_node" "data_attr" {
  depends_on = [data.sysbox_artifact.img.digest]
}
resource "sysbox_node" "variable" {
  depends_on = [var.x]
}
resource "sysbox_node" "expression" {
  depends_on = ["sysbox_node.bar"]
}
resource "sysbox_node" "undeclared" {
  depends_on = [sysbox_node.nope]
}
resource "sysbox_node" "fine" {
  depends_on = [sysbox_node.bar, sysbox_node.bar[1], data.sysbox_artifact.img, module.m]
}
variable "x" {
  default = 1
}
