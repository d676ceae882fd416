variable "name_prefix" {
  description = "Prefix of the Secrets Manager names, e.g. parley-production"
  type        = string
}

variable "namespace" {
  description = "Namespace of the K8ssandraCluster (made by the add-ons stack)"
  type        = string
}

variable "cluster_name" {
  description = "Name of the K8ssandraCluster (and the Cassandra cluster_name)"
  type        = string
  default     = "parley"
}

variable "datacenter" {
  description = "Cassandra datacenter name (PARLEY_CASSANDRA_DC; a key of the keyspace's NetworkTopologyStrategy)"
  type        = string
  default     = "dc1"
}

variable "availability_zones" {
  description = "The AZs of the dedicated Cassandra node groups: one rack per AZ"
  type        = list(string)
}

variable "nodes" {
  description = "Cassandra nodes in the datacenter, spread evenly over the racks"
  type        = number

  validation {
    condition     = var.nodes >= 3 && var.nodes % 3 == 0
    error_message = "nodes must be a multiple of 3 (one rack per AZ, replication factor 3)."
  }
}

variable "server_version" {
  description = "Cassandra version; 5.0 or later, for storage-attached indexes and the vector type (schemas/cql/0004, 0009)"
  type        = string
  default     = "5.0.4"

  validation {
    condition     = can(regex("^[5-9]\\.", var.server_version))
    error_message = "server_version must be 5.0 or later: Parley's schema uses SAI and vector<float, 384>."
  }
}

variable "storage_class" {
  description = "StorageClass of the data volumes (encrypted gp3, from the add-ons stack)"
  type        = string
}

variable "storage_gib" {
  description = "Data volume per node, GiB"
  type        = number
  default     = 1000
}

variable "heap_gib" {
  description = "JVM heap per node, GiB (about a quarter of the node's memory; the rest is page cache)"
  type        = number
  default     = 16
}

variable "cpu" {
  description = "CPU request per Cassandra pod (Kubernetes quantity)"
  type        = string
  default     = "7"
}

variable "memory" {
  description = "Memory request and limit per Cassandra pod (Kubernetes quantity)"
  type        = string
  default     = "56Gi"
}

variable "keyspace" {
  description = "Keyspace Parley's role may use (PARLEY_KEYSPACE); created here with NetworkTopologyStrategy, RF 3"
  type        = string
  default     = "parley"
}

variable "parley_role" {
  description = "Cassandra role Parley's services log in as (PARLEY_CASSANDRA_USERNAME)"
  type        = string
  default     = "parley"
}

variable "cqlsh_image" {
  description = "Image whose cqlsh creates Parley's role and keyspace (the official Apache Cassandra image)"
  type        = string
  default     = "cassandra:5.0.4"
}

variable "secrets_kms_key_arn" {
  description = "KMS key ARN of the Secrets Manager copy of the credentials"
  type        = string
}
