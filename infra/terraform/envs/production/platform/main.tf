# Everything AWS-side: keys, network, the EKS cluster and its node groups, MSK, the buckets, the image
# registry, and the IAM roles of Parley's pods. The addons and datastores stacks read this stack's outputs (terraform_remote_state).

locals {
  name = "parley-${var.environment}"
}

module "kms" {
  source = "../../../modules/kms"

  name_prefix             = local.name
  key_admin_arns          = var.key_admin_arns
  tenancy_key_generations = var.tenancy_key_generations
}

module "network" {
  source = "../../../modules/network"

  name_prefix        = local.name
  cidr               = var.vpc_cidr
  availability_zones = var.availability_zones
  nat_gateway_per_az = var.nat_gateway_per_az
  cluster_name       = local.name
  logs_kms_key_arn   = module.kms.key_arns["logs"]
  log_retention_days = var.log_retention_days
}

module "eks" {
  source = "../../../modules/eks"

  cluster_name           = local.name
  kubernetes_version     = var.kubernetes_version
  vpc_id                 = module.network.vpc_id
  subnet_ids             = module.network.private_subnet_ids
  availability_zones     = module.network.availability_zones
  secrets_kms_key_arn    = module.kms.key_arns["eks"]
  logs_kms_key_arn       = module.kms.key_arns["logs"]
  log_retention_days     = var.log_retention_days
  endpoint_public_access = var.cluster_endpoint_public_access
  public_access_cidrs    = var.cluster_public_access_cidrs
  admin_role_arns        = var.cluster_admin_role_arns
  cpu_node_group         = var.cpu_node_group
  gpu_node_groups        = var.gpu_node_groups

  cassandra_node_group = {
    instance_type = var.cassandra_instance_type
    nodes         = var.cassandra_nodes
  }
}

module "kafka" {
  source = "../../../modules/kafka"

  name                           = local.name
  kafka_version                  = var.kafka_version
  broker_count                   = var.kafka_broker_count
  broker_instance_type           = var.kafka_broker_instance_type
  broker_volume_gib              = var.kafka_broker_volume_gib
  broker_volume_max_gib          = var.kafka_broker_volume_max_gib
  vpc_id                         = module.network.vpc_id
  subnet_ids                     = module.network.private_subnet_ids
  client_security_group_ids      = [module.eks.cluster_security_group_id]
  kafka_kms_key_arn              = module.kms.key_arns["kafka"]
  secrets_kms_key_arn            = module.kms.key_arns["secrets"]
  logs_kms_key_arn               = module.kms.key_arns["logs"]
  log_retention_days             = var.log_retention_days
  acl_deny_by_default            = var.kafka_acl_deny_by_default
  tls_certificate_authority_arns = var.kafka_tls_certificate_authority_arns
}

module "object_storage" {
  source = "../../../modules/object-storage"

  name_prefix = local.name
  kms_key_arn = module.kms.key_arns["s3"]
}

module "registry" {
  source = "../../../modules/registry"

  name_prefix = local.name
  kms_key_arn = module.kms.key_arns["ecr"]
}

module "workload_identity" {
  source = "../../../modules/workload-identity"

  name_prefix          = local.name
  cluster_name         = module.eks.cluster_name
  service_accounts     = var.parley_service_accounts
  tenancy_kms_key_arn  = module.kms.tenancy_key_arn
  tenancy_kms_key_arns = module.kms.tenancy_key_arns
  s3_kms_key_arn       = module.kms.key_arns["s3"]
  documents_bucket_arn = module.object_storage.documents_bucket_arn
  archive_bucket_arn   = module.object_storage.archive_bucket_arn
  kafka_cluster_arn    = module.kafka.cluster_arn
}
