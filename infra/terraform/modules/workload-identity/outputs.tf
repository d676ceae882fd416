output "role_arns" {
  description = "IAM role ARN of each Parley service account"
  value       = { for name, role in aws_iam_role.service_account : name => role.arn }
}
