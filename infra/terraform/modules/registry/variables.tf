variable "name_prefix" {
  description = "Prefix of the repository names, e.g. parley-production"
  type        = string
}

variable "repositories" {
  description = "Repositories to create (the Dockerfile's image: parley; add one per image the cluster builds)"
  type        = list(string)
  default     = ["parley"]
}

variable "kms_key_arn" {
  description = "KMS key ARN that encrypts the images at rest"
  type        = string
}

variable "untagged_image_days" {
  description = "Days an untagged image (an overwritten build) is kept"
  type        = number
  default     = 14
}
