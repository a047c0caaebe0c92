module "m" {
  source  = "./mod"
  unknown = 1
}
