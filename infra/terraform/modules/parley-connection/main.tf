# Everything a Parley pod needs to reach this environment, in the parley namespace, in the names and paths
# the Kubernetes manifests use:
#   ConfigMap parley-infra   every PARLEY_* setting below: envFrom it.
#   Secret parley-kafka      key password: mount at /run/secrets/parley/kafka
#   Secret parley-cassandra  key password: mount at /run/secrets/parley/cassandra
#   ConfigMap parley-cassandra-ca  key ca.crt: mount at /etc/parley/cassandra-ca
#   Secret parley-keda-kafka the KEDA Kafka scaler's TriggerAuthentication parameters
#                            (sasl, username, password, tls), by secretTargetRef.
# Passwords reach processes as files (PARLEY_*_PASSWORD_FILE), never as environment values. There is no
# key-encryption key here: data keys are wrapped by AWS KMS (PARLEY_KMS=aws), which the pods' IAM roles may
# call with a user_id encryption context only (workload-identity's tenancy-kek).

locals {
  mounts = {
    kafka     = "/run/secrets/parley/kafka"
    cassandra = "/run/secrets/parley/cassandra"
    ca        = "/etc/parley/cassandra-ca"
  }

  settings = {
    AWS_REGION                      = var.region
    AWS_DEFAULT_REGION              = var.region
    PARLEY_KAFKA_BOOTSTRAP          = var.kafka_bootstrap
    PARLEY_KAFKA_SECURITY_PROTOCOL  = "SASL_SSL"
    PARLEY_KAFKA_SASL_MECHANISM     = "SCRAM-SHA-512"
    PARLEY_KAFKA_SASL_USERNAME      = var.kafka_username
    PARLEY_KAFKA_SASL_PASSWORD_FILE = "${local.mounts.kafka}/password"
    PARLEY_KAFKA_REPLICATION        = tostring(var.kafka_replication)
    PARLEY_CASSANDRA_HOSTS          = var.cassandra_contact_point
    PARLEY_CASSANDRA_DC             = var.cassandra_datacenter
    PARLEY_CASSANDRA_REPLICATION    = var.cassandra_replication
    PARLEY_KEYSPACE                 = var.cassandra_keyspace
    PARLEY_CASSANDRA_USERNAME       = var.cassandra_username
    PARLEY_CASSANDRA_PASSWORD_FILE  = "${local.mounts.cassandra}/password"
    PARLEY_CASSANDRA_SSL            = "1"
    PARLEY_CASSANDRA_SSL_CA         = "${local.mounts.ca}/ca.crt"
    # The driver dials discovered nodes by pod IP; the node certificate names the service (dnsNames).
    PARLEY_CASSANDRA_SSL_SERVER_NAME = var.cassandra_contact_point
    PARLEY_KMS                       = "aws"
    PARLEY_KMS_KEY_ID                = var.tenancy_kms_key_arn
    PARLEY_KMS_REGION                = var.region
    PARLEY_ARCHIVE_URL               = "s3://${var.archive_bucket}/"
    PARLEY_DOCUMENTS_BLOB_URL        = "s3://${var.documents_bucket}/originals"
  }
}

resource "kubernetes_config_map_v1" "settings" {
  metadata {
    name      = "parley-infra"
    namespace = var.namespace
  }

  data = local.settings
}

resource "kubernetes_config_map_v1" "cassandra_ca" {
  metadata {
    name      = "parley-cassandra-ca"
    namespace = var.namespace
  }

  data = { "ca.crt" = var.cassandra_ca_pem }
}

resource "kubernetes_secret_v1" "kafka" {
  metadata {
    name      = "parley-kafka"
    namespace = var.namespace
  }

  data = { password = var.kafka_password }
}

resource "kubernetes_secret_v1" "cassandra" {
  metadata {
    name      = "parley-cassandra"
    namespace = var.namespace
  }

  data = { password = var.cassandra_password }
}

resource "kubernetes_secret_v1" "keda_kafka" {
  metadata {
    name      = "parley-keda-kafka"
    namespace = var.namespace
  }

  data = {
    sasl     = "scram_sha512"
    username = var.keda_kafka_username
    password = var.keda_kafka_password
    tls      = "enable"
  }
}
