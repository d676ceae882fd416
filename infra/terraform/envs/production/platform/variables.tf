variable "region" {
  description = "AWS region of the whole environment"
  type        = string
  default     = "us-east-1"
}

variable "environment" {
  description = "Environment name, part of every resource name (parley-<environment>-...)"
  type        = string
  default     = "production"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,11}$", var.environment))
    error_message = "environment: 2 to 12 lower-case letters, digits or '-' (bucket names must stay under 63 characters)."
  }
}

variable "tags" {
  description = "Tags added to every AWS resource"
  type        = map(string)
  default     = {}
}

variable "availability_zones" {
  description = "The three AZs of the environment, in var.region (pick ones with capacity for the GPU instance types)"
  type        = list(string)
  default     = ["us-east-1a", "us-east-1b", "us-east-1c"]
}

variable "vpc_cidr" {
  description = "IPv4 range of the VPC (a /16)"
  type        = string
  default     = "10.40.0.0/16"
}

variable "nat_gateway_per_az" {
  description = "One NAT gateway per AZ (true) or one for all (false, cheaper, an AZ outage cuts egress)"
  type        = bool
  default     = true
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps flow, control plane and broker logs"
  type        = number
  default     = 365
}

variable "key_admin_arns" {
  description = "IAM principals that administer the KMS keys (empty: the account root, through IAM)"
  type        = list(string)
  default     = []
}

variable "tenancy_key_generations" {
  description = "Generations of the tenancy key-encryption key, oldest first; the last wraps new data keys (docs/operations.md, \"Rotating the key-encryption key\")"
  type        = list(string)
  default     = ["1"]
}

variable "kubernetes_version" {
  description = "Kubernetes minor version of the EKS cluster"
  type        = string
  default     = "1.33"
}

variable "cluster_endpoint_public_access" {
  description = "Expose the Kubernetes API on the internet (to cluster_public_access_cidrs only); false: apply the addons and datastores stacks from inside the VPC"
  type        = bool
  default     = false
}

variable "cluster_public_access_cidrs" {
  description = "Operator CIDRs allowed to the public Kubernetes API endpoint"
  type        = list(string)
  default     = []
}

variable "cluster_admin_role_arns" {
  description = "IAM roles given cluster-admin on EKS (the role that runs the addons and datastores stacks, operators)"
  type        = list(string)
  default     = []
}

variable "cpu_node_group" {
  description = "Node group of Parley's CPU services: instance types and sizes"
  type = object({
    instance_types = list(string)
    min_size       = number
    desired_size   = number
    max_size       = number
    disk_gib       = optional(number, 100)
  })
  default = {
    instance_types = ["m7i.4xlarge"]
    min_size       = 3
    desired_size   = 6
    max_size       = 60
  }
}

variable "cassandra_nodes" {
  description = "Cassandra nodes in the datacenter (a multiple of 3: one rack per AZ), each on a dedicated node"
  type        = number
  default     = 6
}

variable "cassandra_instance_type" {
  description = "Instance type of the dedicated Cassandra nodes"
  type        = string
  default     = "r7i.2xlarge"
}

variable "gpu_node_groups" {
  description = "GPU node groups by name: pool, GPU label value (parley.dev/gpu), GPU product, instance type, GPUs per node, sizes, EFA interfaces"
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
  # Sized for infra/fleet/example.yaml at its replica maxima: small 12 x 1 GPU, medium 6 x 2 GPUs, frontier
  # prefill up to 4 replicas x 2 nodes and decode up to 3 x 4 nodes, all H100 80GB (p5.48xlarge: 8 per node).
  default = {
    small = {
      pool          = "small"
      gpu_type      = "nvidia-h100-80gb"
      gpu_product   = "NVIDIA-H100-80GB-HBM3"
      instance_type = "p5.48xlarge"
      gpus_per_node = 8
      min_size      = 1
      desired_size  = 1
      max_size      = 2
    }
    medium = {
      pool          = "medium"
      gpu_type      = "nvidia-h100-80gb"
      gpu_product   = "NVIDIA-H100-80GB-HBM3"
      instance_type = "p5.48xlarge"
      gpus_per_node = 8
      min_size      = 1
      desired_size  = 1
      max_size      = 2
    }
    frontier-prefill = {
      pool           = "frontier"
      gpu_type       = "nvidia-h100-80gb"
      gpu_product    = "NVIDIA-H100-80GB-HBM3"
      instance_type  = "p5.48xlarge"
      gpus_per_node  = 8
      min_size       = 2
      desired_size   = 2
      max_size       = 8
      efa_interfaces = 32
    }
    frontier-decode = {
      pool           = "frontier"
      gpu_type       = "nvidia-h100-80gb"
      gpu_product    = "NVIDIA-H100-80GB-HBM3"
      instance_type  = "p5.48xlarge"
      gpus_per_node  = 8
      min_size       = 4
      desired_size   = 4
      max_size       = 12
      efa_interfaces = 32
    }
  }
}

variable "kafka_version" {
  description = "Apache Kafka version of MSK (3.x or later)"
  type        = string
  default     = "3.9.x"
}

variable "kafka_broker_count" {
  description = "MSK brokers (a multiple of 3)"
  type        = number
  default     = 6
}

variable "kafka_broker_instance_type" {
  description = "MSK broker instance type"
  type        = string
  default     = "kafka.m7g.2xlarge"
}

variable "kafka_broker_volume_gib" {
  description = "EBS storage per broker at creation, GiB"
  type        = number
  default     = 2000
}

variable "kafka_broker_volume_max_gib" {
  description = "Most EBS storage per broker that storage autoscaling may reach, GiB"
  type        = number
  default     = 16000
}

variable "kafka_acl_deny_by_default" {
  description = "Brokers refuse a SCRAM user what no ACL grants (allow.everyone.if.no.acl.found=false); false until the README's ACLs exist, if they cannot be set first"
  type        = bool
  default     = true
}

variable "kafka_tls_certificate_authority_arns" {
  description = "ACM Private CA ARNs for mutual TLS clients (empty: SCRAM-SHA-512 and IAM only)"
  type        = list(string)
  default     = []
}

variable "parley_service_accounts" {
  description = "Parley's Kubernetes service accounts in the parley namespace and their AWS capabilities (see modules/workload-identity)"
  type        = map(list(string))
  default = {
    parley-gateway     = ["tenancy-kek", "documents"]
    parley-documents   = ["tenancy-kek", "documents"]
    parley-streams     = ["tenancy-kek"]
    parley-workers     = ["tenancy-kek"]
    parley-archive     = ["tenancy-kek", "archive"]
    parley-kafka-admin = ["kafka-admin"]
  }
}
