output "parley_settings" {
  description = "The PARLEY_* settings in ConfigMap parley/parley-infra"
  value       = module.parley_connection.settings
}

output "parley_mount_paths" {
  description = "Where Parley's manifests mount each Secret and ConfigMap"
  value       = module.parley_connection.mount_paths
}

output "cassandra_credentials_secret_arn" {
  description = "Secrets Manager ARN of the Cassandra superuser and Parley role credentials"
  value       = module.cassandra.credentials_secret_arn
}
