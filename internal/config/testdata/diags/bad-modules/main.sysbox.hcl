module "reg" {
  source = "hashicorp/consul/aws"
}
module "missing" {
  source = "./does-not-exist"
}
