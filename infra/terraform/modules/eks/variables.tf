variable "cluster_name" {
  description = "Name of the EKS cluster"
  type        = string
}

variable "kubernetes_version" {
  description = "Kubernetes minor version of the control plane and node AMIs, e.g. 1.33"
  type        = string
  default     = "1.33"
}

variable "vpc_id" {
  description = "VPC the cluster and its nodes run in"
  type        = string
}

variable "subnet_ids" {
  description = "Private subnet IDs, one per AZ, in availability_zones order"
  type        = list(string)
}

variable "availability_zones" {
  description = "The AZs of subnet_ids, in the same order (one Cassandra node group is pinned to each)"
  type        = list(string)
}

variable "secrets_kms_key_arn" {
  description = "KMS key ARN for envelope encryption of Kubernetes Secrets"
  type        = string
}

variable "logs_kms_key_arn" {
  description = "KMS key ARN that encrypts the control plane's log group"
  type        = string
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps the control plane logs"
  type        = number
  default     = 365
}

variable "endpoint_public_access" {
  description = "Expose the Kubernetes API endpoint on the internet (false: reachable from the VPC only, e.g. a CI runner or a VPN)"
  type        = bool
  default     = false
}

variable "public_access_cidrs" {
  description = "CIDRs allowed to the public API endpoint when endpoint_public_access is true"
  type        = list(string)
  default     = []

  validation {
    condition     = !contains(var.public_access_cidrs, "0.0.0.0/0")
    error_message = "public_access_cidrs must not contain 0.0.0.0/0; name the operators' ranges."
  }
}

variable "admin_role_arns" {
  description = "IAM roles given cluster-admin through EKS access entries (besides whoever creates the cluster)"
  type        = list(string)
  default     = []
}

variable "cpu_node_group" {
  description = "Nodes for Parley's CPU services (gateway, edge, processors, workers, document workers) and the add-ons"
  type = object({
    instance_types = list(string)
    min_size       = number
    desired_size   = number
    max_size       = number
    disk_gib       = optional(number, 100)
  })
}

variable "cassandra_node_group" {
  description = "Dedicated Cassandra nodes: `nodes` per datacenter, spread evenly over the AZs (one node group per AZ, since a node's EBS volume cannot leave its AZ)"
  type = object({
    instance_type = string
    nodes         = number
    disk_gib      = optional(number, 50)
  })

  validation {
    condition     = var.cassandra_node_group.nodes >= 3 && var.cassandra_node_group.nodes % 3 == 0
    error_message = "cassandra_node_group.nodes must be a multiple of 3 (one rack per AZ, replication factor 3)."
  }
}

variable "gpu_node_groups" {
  description = <<-EOT
    GPU node groups by name (e.g. small, medium, frontier-prefill, frontier-decode). Each node is labelled
    parley.dev/gpu=<gpu_type>, parley.dev/pool=<pool> and nvidia.com/gpu.product=<gpu_product>, and tainted
    nvidia.com/gpu=present:NoSchedule so only GPU pods land there. efa_interfaces > 0 adds EFA network
    interfaces and a cluster placement group in one AZ (multi-node tensor parallelism, PD transfers over RDMA).
  EOT
  type = map(object({
    pool           = string
    gpu_type       = string
    gpu_product    = string
    instance_type  = string
    gpus_per_node  = number
    min_size       = number
    desired_size   = number
    max_size       = number
    disk_gib       = optional(number, 1000)
    capacity_type  = optional(string, "ON_DEMAND")
    efa_interfaces = optional(number, 0)
  }))

  validation {
    condition     = alltrue([for g in values(var.gpu_node_groups) : contains(["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"], g.capacity_type)])
    error_message = "gpu_node_groups[*].capacity_type must be ON_DEMAND, SPOT or CAPACITY_BLOCK."
  }

  validation {
    condition     = alltrue([for g in values(var.gpu_node_groups) : can(regex("^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", g.gpu_type))])
    error_message = "gpu_node_groups[*].gpu_type is a Kubernetes label value: lower-case letters, digits, '-' and '.'."
  }
}
