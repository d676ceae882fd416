output "key_arns" {
  description = "ARN of each key by purpose: tenancy, s3, kafka, eks, logs, secrets, ecr"
  value       = { for name, key in aws_kms_key.this : name => key.arn }
}

output "tenancy_key_arn" {
  description = "ARN of the tenancy key-encryption key (for a cloud KMS adapter: Encrypt/Decrypt with user_id as encryption context)"
  value       = aws_kms_key.this["tenancy"].arn
}

output "interim_kek_secret_arn" {
  description = "ARN of the Secrets Manager secret holding the LocalKms key file every Parley pod mounts"
  value       = aws_secretsmanager_secret.interim_kek.arn
}
