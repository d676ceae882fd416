output "contact_point" {
  description = "DNS name clients connect to (PARLEY_CASSANDRA_HOSTS); the driver discovers the other nodes from it"
  value       = local.service
}

output "datacenter" {
  description = "Cassandra datacenter name (PARLEY_CASSANDRA_DC)"
  value       = var.datacenter
}

output "replication" {
  description = "Replication map of Parley's keyspace (PARLEY_CASSANDRA_REPLICATION)"
  value       = local.replication
}

output "keyspace" {
  description = "Keyspace Parley's role owns (PARLEY_KEYSPACE)"
  value       = var.keyspace
}

output "parley_role" {
  description = "Cassandra role Parley's services log in as"
  value       = var.parley_role
}

output "parley_password" {
  description = "Password of the Parley role"
  value       = random_password.parley.result
  sensitive   = true
}

output "ca_certificate_pem" {
  description = "PEM of the CA the nodes' certificates chain to (PARLEY_CASSANDRA_SSL_CA)"
  value       = tls_self_signed_cert.ca.cert_pem
}

output "credentials_secret_arn" {
  description = "Secrets Manager ARN of the superuser and Parley role credentials"
  value       = aws_secretsmanager_secret.credentials.arn
}
