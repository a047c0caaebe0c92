output "out" {
  value = 1
}
