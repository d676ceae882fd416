output "key_arns" {
  description = "ARN of each key by purpose: tenancy (its newest generation), s3, kafka, eks, logs, secrets, ecr"
  value       = merge({ for name, key in aws_kms_key.this : name => key.arn }, { tenancy = aws_kms_key.tenancy[local.active].arn })
}

output "tenancy_key_arn" {
  description = "ARN of the tenancy key-encryption key's newest generation: PARLEY_KMS_KEY_ID, what new data keys are wrapped under"
  value       = aws_kms_key.tenancy[local.active].arn
}

output "tenancy_key_arns" {
  description = "ARNs of every live generation of the tenancy key-encryption key: data keys are unwrapped under any of them until a rotation moves them to the newest"
  value       = [for generation in var.tenancy_key_generations : aws_kms_key.tenancy[generation].arn]
}
