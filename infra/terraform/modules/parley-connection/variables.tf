variable "namespace" {
  description = "Namespace of Parley's services"
  type        = string
}

variable "region" {
  description = "AWS region (the S3 clients' AWS_REGION)"
  type        = string
}

variable "kafka_bootstrap" {
  description = "host:port list of MSK's SASL/SCRAM-over-TLS listener"
  type        = string
}

variable "kafka_username" {
  description = "SCRAM user of Parley's services"
  type        = string
}

variable "kafka_password" {
  description = "That user's password"
  type        = string
  sensitive   = true
}

variable "keda_kafka_username" {
  description = "SCRAM user KEDA's Kafka scaler reads consumer-group lag as"
  type        = string
}

variable "keda_kafka_password" {
  description = "That user's password"
  type        = string
  sensitive   = true
}

variable "kafka_replication" {
  description = "Replication factor of the topics `parley topics` creates (PARLEY_KAFKA_REPLICATION)"
  type        = number
  default     = 3
}

variable "cassandra_contact_point" {
  description = "DNS name of the Cassandra service (PARLEY_CASSANDRA_HOSTS)"
  type        = string
}

variable "cassandra_datacenter" {
  description = "Local Cassandra datacenter (PARLEY_CASSANDRA_DC)"
  type        = string
}

variable "cassandra_replication" {
  description = "Replication map of the keyspace (PARLEY_CASSANDRA_REPLICATION)"
  type        = string
}

variable "cassandra_keyspace" {
  description = "Parley's keyspace (PARLEY_KEYSPACE)"
  type        = string
}

variable "cassandra_username" {
  description = "Cassandra role of Parley's services"
  type        = string
}

variable "cassandra_password" {
  description = "That role's password"
  type        = string
  sensitive   = true
}

variable "cassandra_ca_pem" {
  description = "PEM of the CA of the Cassandra nodes' certificates"
  type        = string
}

variable "tenancy_kms_key_arn" {
  description = "ARN of the tenancy key-encryption key's newest generation (PARLEY_KMS_KEY_ID): new data keys are wrapped under it"
  type        = string
}

variable "archive_bucket" {
  description = "Event archive bucket name"
  type        = string
}

variable "documents_bucket" {
  description = "Documents bucket name"
  type        = string
}
