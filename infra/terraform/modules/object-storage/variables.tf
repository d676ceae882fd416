variable "name_prefix" {
  description = "Prefix of the bucket names (the account ID and region are appended: bucket names are global)"
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key ARN of the archive and documents buckets (SSE-KMS)"
  type        = string
}

variable "archive_transitions" {
  description = "Storage class changes of archived segments by age in days: replay reads the archive rarely and in bulk"
  type = list(object({
    days          = number
    storage_class = string
  }))
  default = [
    { days = 30, storage_class = "STANDARD_IA" },
    { days = 180, storage_class = "GLACIER_IR" },
  ]
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object version is kept before S3 deletes it (bounds how long a deleted document's original outlives its delete)"
  type        = number
  default     = 30
}

variable "access_log_retention_days" {
  description = "Days the S3 server access logs are kept"
  type        = number
  default     = 365
}
