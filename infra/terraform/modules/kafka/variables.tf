variable "name" {
  description = "Name of the MSK cluster, e.g. parley-production"
  type        = string
}

variable "kafka_version" {
  description = "Apache Kafka version MSK runs (3.x or later: Parley needs transactions, idempotent producers and KIP-447 fencing)"
  type        = string
  default     = "3.9.x"

  validation {
    condition     = can(regex("^([3-9]|[1-9][0-9])\\.", var.kafka_version))
    error_message = "kafka_version must be 3.x or later."
  }
}

variable "broker_count" {
  description = "Number of brokers, a multiple of the number of subnets (MSK puts the same number in each AZ)"
  type        = number
}

variable "broker_instance_type" {
  description = "MSK broker instance type, e.g. kafka.m7g.2xlarge"
  type        = string
}

variable "broker_volume_gib" {
  description = "EBS storage per broker at creation, GiB"
  type        = number
}

variable "broker_volume_max_gib" {
  description = "Largest EBS storage per broker that storage autoscaling may grow to, GiB"
  type        = number
}

variable "vpc_id" {
  description = "VPC of the brokers"
  type        = string
}

variable "subnet_ids" {
  description = "Private subnets, one per AZ, the brokers are spread over"
  type        = list(string)
}

variable "client_security_group_ids" {
  description = "Security groups whose members may reach the brokers (the EKS cluster's)"
  type        = list(string)
}

variable "kafka_kms_key_arn" {
  description = "KMS key ARN for broker storage at rest"
  type        = string
}

variable "secrets_kms_key_arn" {
  description = "KMS key ARN of the SCRAM secrets (MSK refuses secrets under the AWS-managed key)"
  type        = string
}

variable "logs_kms_key_arn" {
  description = "KMS key ARN of the broker log group"
  type        = string
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps the broker logs"
  type        = number
  default     = 365
}

variable "scram_users" {
  description = "SCRAM-SHA-512 users to create, each with a generated password in Secrets Manager (parley: every service; keda: reads consumer-group lag)"
  type        = list(string)
  default     = ["parley", "keda"]
}

variable "acl_deny_by_default" {
  description = "allow.everyone.if.no.acl.found=false: a SCRAM user may only do what an ACL grants (set the ACLs of the README before starting Parley)"
  type        = bool
  default     = true
}

variable "tls_certificate_authority_arns" {
  description = "ACM Private CA ARNs whose client certificates the brokers accept (mutual TLS); empty: SCRAM and IAM only"
  type        = list(string)
  default     = []
}
