variable "state_bucket" {
  description = "S3 bucket holding the stacks' state (the bucket of backend.hcl), to read the platform stack's outputs"
  type        = string
}

variable "state_region" {
  description = "Region of the state bucket"
  type        = string
  default     = "us-east-1"
}

variable "chart_versions" {
  description = "Helm chart version overrides by add-on (see modules/cluster-addons for the names and pinned defaults)"
  type        = map(string)
  default     = {}
}
