# What runs on the add-ons' operators for Parley: the Cassandra datacenter (K8ssandraCluster, its TLS, its
# roles and keyspace), and the parley namespace's connection settings and secrets for Kafka, Cassandra, the
# buckets and the KMS key that wraps data keys (an ARN: no key material). A stack of its own: its custom resources need the add-ons' CRDs at plan time.

data "aws_secretsmanager_secret_version" "scram" {
  for_each = local.platform.kafka_scram_secret_arns

  secret_id = each.value
}

locals {
  # SCRAM user name => its {"username", "password"} (the platform stack's kafka module: parley, keda).
  scram = { for user, v in data.aws_secretsmanager_secret_version.scram : user => jsondecode(v.secret_string) }
}

module "cassandra" {
  source = "../../../modules/cassandra"

  name_prefix         = "parley-${local.platform.environment}"
  namespace           = local.addons.cassandra_namespace
  availability_zones  = local.platform.availability_zones
  nodes               = local.platform.cassandra_nodes
  server_version      = var.cassandra_server_version
  storage_class       = local.addons.storage_class
  storage_gib         = var.cassandra_storage_gib
  heap_gib            = var.cassandra_heap_gib
  cpu                 = var.cassandra_cpu
  memory              = var.cassandra_memory
  secrets_kms_key_arn = local.platform.kms_key_arns["secrets"]
}

module "parley_connection" {
  source = "../../../modules/parley-connection"

  namespace               = local.addons.parley_namespace
  region                  = local.platform.region
  kafka_bootstrap         = local.platform.kafka_bootstrap_brokers_scram
  kafka_username          = "parley"
  kafka_password          = local.scram["parley"].password
  keda_kafka_username     = "keda"
  keda_kafka_password     = local.scram["keda"].password
  cassandra_contact_point = module.cassandra.contact_point
  cassandra_datacenter    = module.cassandra.datacenter
  cassandra_replication   = module.cassandra.replication
  cassandra_keyspace      = module.cassandra.keyspace
  cassandra_username      = module.cassandra.parley_role
  cassandra_password      = module.cassandra.parley_password
  cassandra_ca_pem        = module.cassandra.ca_certificate_pem
  tenancy_kms_key_arn     = local.platform.kms_key_arns["tenancy"]
  archive_bucket          = local.platform.archive_bucket
  documents_bucket        = local.platform.documents_bucket
}
