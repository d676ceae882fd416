output "region" {
  description = "AWS region of the environment"
  value       = var.region
}

output "environment" {
  description = "Environment name"
  value       = var.environment
}

output "cluster_name" {
  description = "EKS cluster name (aws eks update-kubeconfig --name <this>)"
  value       = module.eks.cluster_name
}

output "cluster_endpoint" {
  description = "Kubernetes API server URL"
  value       = module.eks.cluster_endpoint
}

output "cluster_ca_data" {
  description = "Base64 PEM of the cluster's certificate authority"
  value       = module.eks.cluster_ca_data
}

output "kubernetes_version" {
  description = "Kubernetes minor version of the cluster"
  value       = var.kubernetes_version
}

output "availability_zones" {
  description = "The three AZs, in subnet order (Cassandra racks)"
  value       = module.network.availability_zones
}

output "gpu_node_labels" {
  description = "Labels of each GPU node group, as the manifests select them"
  value       = module.eks.gpu_node_labels
}

output "cassandra_nodes" {
  description = "Cassandra nodes in the datacenter (the datastores stack sizes the K8ssandraCluster by it)"
  value       = var.cassandra_nodes
}

output "kafka_bootstrap_brokers_scram" {
  description = "PARLEY_KAFKA_BOOTSTRAP: MSK's SASL/SCRAM-over-TLS listener"
  value       = module.kafka.bootstrap_brokers_scram
}

output "kafka_bootstrap_brokers_iam" {
  description = "MSK's IAM listener, for the admin client that sets ACLs"
  value       = module.kafka.bootstrap_brokers_iam
}

output "kafka_scram_secret_arns" {
  description = "Secrets Manager ARN of each SCRAM user's credentials"
  value       = module.kafka.scram_secret_arns
}

output "kms_key_arns" {
  description = "KMS key ARN of each purpose"
  value       = module.kms.key_arns
}

output "tenancy_key_arns" {
  description = "Every live generation of the tenancy key-encryption key (the last: PARLEY_KMS_KEY_ID)"
  value       = module.kms.tenancy_key_arns
}

output "archive_bucket" {
  description = "Event archive bucket"
  value       = module.object_storage.archive_bucket
}

output "documents_bucket" {
  description = "Documents bucket"
  value       = module.object_storage.documents_bucket
}

output "service_account_role_arns" {
  description = "IAM role of each Parley service account (bound by EKS Pod Identity; no annotation needed)"
  value       = module.workload_identity.role_arns
}

output "image_repository_urls" {
  description = "ECR repository URL of each image (push the Dockerfile's build to parley)"
  value       = module.registry.repository_urls
}
