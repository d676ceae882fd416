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

variable "tenancy_key_generations" {
  description = "Generations of the tenancy key-encryption key, oldest first; the last wraps new data keys. Rotating: append one, apply, roll out, `parley keys rotate-kek`, then retire the old one (docs/operations.md)"
  type        = list(string)
  default     = ["1"]

  validation {
    condition     = length(var.tenancy_key_generations) > 0 && length(distinct(var.tenancy_key_generations)) == length(var.tenancy_key_generations)
    error_message = "tenancy_key_generations must name at least one generation, each once."
  }
}
