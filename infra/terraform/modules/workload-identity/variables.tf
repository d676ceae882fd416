variable "name_prefix" {
  description = "Prefix of the role names, e.g. parley-production"
  type        = string
}

variable "cluster_name" {
  description = "EKS cluster whose pods take the roles (EKS Pod Identity)"
  type        = string
}

variable "namespace" {
  description = "Kubernetes namespace of Parley's service accounts"
  type        = string
  default     = "parley"
}

variable "service_accounts" {
  description = <<-EOT
    Parley's Kubernetes service accounts and what each may do in AWS: tenancy-kek (Encrypt/Decrypt under the
    tenancy key, only with a user_id encryption context: parley/kms.py AwsKms's two calls), documents (read,
    write and delete originals), archive (read and write archived segments), kafka-admin (IAM client of MSK:
    ACLs and topics, for the operators' admin job).
  EOT
  type        = map(list(string))

  validation {
    condition     = alltrue([for caps in values(var.service_accounts) : alltrue([for c in caps : contains(["tenancy-kek", "documents", "archive", "kafka-admin"], c)])])
    error_message = "Each service account's capabilities must be among tenancy-kek, documents, archive, kafka-admin."
  }
}

variable "tenancy_kms_key_arn" {
  description = "ARN of the tenancy key-encryption key's newest generation (new data keys are wrapped under it)"
  type        = string
}

variable "tenancy_kms_key_arns" {
  description = "ARNs of every live generation of the tenancy key-encryption key (data keys are unwrapped under any)"
  type        = list(string)
}

variable "s3_kms_key_arn" {
  description = "ARN of the buckets' SSE-KMS key"
  type        = string
}

variable "documents_bucket_arn" {
  description = "ARN of the documents bucket"
  type        = string
}

variable "archive_bucket_arn" {
  description = "ARN of the event archive bucket"
  type        = string
}

variable "kafka_cluster_arn" {
  description = "ARN of the MSK cluster (for kafka-admin)"
  type        = string
}
