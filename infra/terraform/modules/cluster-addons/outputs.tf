output "parley_namespace" {
  description = "Namespace Parley's services run in"
  value       = kubernetes_namespace_v1.parley.metadata[0].name
}

output "cassandra_namespace" {
  description = "Namespace of the K8ssandraCluster"
  value       = kubernetes_namespace_v1.cassandra.metadata[0].name
}

output "storage_class" {
  description = "Name of the encrypted gp3 StorageClass (the cluster's default)"
  value       = kubernetes_storage_class_v1.gp3.metadata[0].name
}

output "grafana_admin_secret" {
  description = "namespace/name of the Secret holding Grafana's admin login"
  value       = "${kubernetes_secret_v1.grafana_admin.metadata[0].namespace}/${kubernetes_secret_v1.grafana_admin.metadata[0].name}"
}
