variable "name" {
  description = "Bucket name (global: include the account and region)"
  type        = string
}

variable "kms_key_arn" {
  description = "KMS key ARN of the bucket's default encryption (SSE-KMS, with S3 bucket keys)"
  type        = string
}

variable "log_bucket" {
  description = "Bucket receiving this bucket's server access logs"
  type        = string
}

variable "log_prefix" {
  description = "Key prefix of this bucket's access logs in log_bucket"
  type        = string
}

variable "transitions" {
  description = "Storage class changes of current objects by age in days (empty: objects stay in STANDARD)"
  type = list(object({
    days          = number
    storage_class = string
  }))
  default = []
}

variable "noncurrent_version_days" {
  description = "Days an overwritten or deleted object version is kept before S3 deletes it"
  type        = number
}
