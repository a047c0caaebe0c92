# modules-foreach: one module instance per segment, chosen with for_each over a map variable.
# Each segment gets its own network, counted targets and a firewall; a jump host joins every
# segment through a dynamic attachment block. Addresses come out structured:
#   module.segment["red"].sysbox_node.target[1]

variable "segments" {
  type = map(object({
    cidr    = string
    targets = number
  }))
  default = {
    red  = { cidr = "198.18.1.0/24", targets = 2 }
    blue = { cidr = "198.18.2.0/24", targets = 1 }
  }
}

module "segment" {
  source   = "./modules/segment"
  for_each = var.segments

  name    = each.key
  cidr    = each.value.cidr
  targets = each.value.targets
}

resource "sysbox_node" "jump" {
  command = ["sleep", "infinity"]

  dynamic "attachment" {
    for_each = module.segment
    labels   = [attachment.key] # the attachment is named after its segment
    content {
      network = attachment.value.network
      ipv4    = ["${cidrhost(attachment.value.cidr, 250)}/24"]
    }
  }
}

output "targets" {
  value = { for name, seg in module.segment : name => seg.target_ips }
}
