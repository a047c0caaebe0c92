variable "required" {
  type = string
}
