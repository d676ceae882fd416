variable "name_prefix" {
  description = "Prefix of every name and alias, e.g. parley-production"
  type        = string
}

variable "deletion_window_days" {
  description = "Days a scheduled key deletion waits before the key is gone (AWS allows 7 to 30)"
  type        = number
  default     = 30

  validation {
    condition     = var.deletion_window_days >= 7 && var.deletion_window_days <= 30
    error_message = "deletion_window_days must be between 7 and 30."
  }
}

variable "key_admin_arns" {
  description = "IAM principals that administer (but cannot use) the keys; empty: the account root only, through IAM policies"
  type        = list(string)
  default     = []
}
