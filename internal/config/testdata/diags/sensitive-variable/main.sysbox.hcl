variable "password" {
  type      = string
  default   = "hunter2"
  sensitive = true
}
resource "sysbox_node" "a" {
  environment = { PW = var.password, TOKEN = env("TOKEN") }
}
output "pw" {
  value = var.password
}
resource "sysbox_node" "b" {
  hostname = env("HOST")
  command  = ["run", env("ARG")]
}
resource "sysbox_network" "n" {
  ipv4_cidr = env("CIDR")
}
