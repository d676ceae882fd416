output "parley_namespace" {
  description = "Namespace of Parley's services"
  value       = module.cluster_addons.parley_namespace
}

output "cassandra_namespace" {
  description = "Namespace of the K8ssandraCluster"
  value       = module.cluster_addons.cassandra_namespace
}

output "storage_class" {
  description = "Encrypted gp3 StorageClass (the cluster default)"
  value       = module.cluster_addons.storage_class
}

output "grafana_admin_secret" {
  description = "namespace/name of Grafana's admin login Secret"
  value       = module.cluster_addons.grafana_admin_secret
}
