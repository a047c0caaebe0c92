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
