variable "state_bucket" {
  description = "S3 bucket holding the stacks' state (the bucket of backend.hcl), to read the other stacks' outputs"
  type        = string
}

variable "state_region" {
  description = "Region of the state bucket"
  type        = string
  default     = "us-east-1"
}

variable "cassandra_server_version" {
  description = "Cassandra version the K8ssandraCluster runs (5.0 or later)"
  type        = string
  default     = "5.0.4"
}

variable "cassandra_storage_gib" {
  description = "Cassandra data volume per node, GiB"
  type        = number
  default     = 1000
}

variable "cassandra_heap_gib" {
  description = "Cassandra JVM heap per node, GiB"
  type        = number
  default     = 16
}

variable "cassandra_cpu" {
  description = "CPU request per Cassandra pod (fits an r7i.2xlarge's 8 vCPUs with room for the node's agents)"
  type        = string
  default     = "7"
}

variable "cassandra_memory" {
  description = "Memory per Cassandra pod (fits an r7i.2xlarge's 64 GiB)"
  type        = string
  default     = "56Gi"
}
