output "cluster_arn" {
  description = "ARN of the MSK cluster"
  value       = aws_msk_cluster.this.arn
}

output "cluster_name" {
  description = "Name of the MSK cluster"
  value       = aws_msk_cluster.this.cluster_name
}

output "bootstrap_brokers_scram" {
  description = "host:port list of the SASL/SCRAM-over-TLS listener: PARLEY_KAFKA_BOOTSTRAP and KEDA's bootstrapServers"
  value       = aws_msk_cluster.this.bootstrap_brokers_sasl_scram
}

output "bootstrap_brokers_iam" {
  description = "host:port list of the IAM-over-TLS listener, for the operators' admin client (ACLs)"
  value       = aws_msk_cluster.this.bootstrap_brokers_sasl_iam
}

output "scram_secret_arns" {
  description = "Secrets Manager ARN of each SCRAM user's credentials ({\"username\", \"password\"}) by user name"
  value       = { for user, secret in aws_secretsmanager_secret.scram : user => secret.arn }
}

output "security_group_id" {
  description = "Security group of the brokers"
  value       = aws_security_group.brokers.id
}
