variable "cluster_name" {
  description = "EKS cluster the add-ons run on (the cluster autoscaler discovers its node groups by it)"
  type        = string
}

variable "region" {
  description = "AWS region of the cluster"
  type        = string
}

variable "kubernetes_version" {
  description = "Kubernetes minor version of the cluster; the cluster autoscaler's image follows it"
  type        = string
}

variable "parley_namespace" {
  description = "Namespace Parley's services run in (the Kubernetes manifests assume parley)"
  type        = string
  default     = "parley"
}

variable "cassandra_namespace" {
  description = "Namespace of the K8ssandraCluster"
  type        = string
  default     = "cassandra"
}

variable "chart_versions" {
  description = "Helm chart versions that replace the pinned defaults of main.tf, by add-on name"
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([for name in keys(var.chart_versions) : contains([
      "cert_manager", "keda", "kube_prometheus_stack", "leader_worker_set", "k8ssandra_operator",
      "nvidia_device_plugin", "efa_device_plugin", "cluster_autoscaler", "metrics_server",
    ], name)])
    error_message = "chart_versions keys: cert_manager, keda, kube_prometheus_stack, leader_worker_set, k8ssandra_operator, nvidia_device_plugin, efa_device_plugin, cluster_autoscaler, metrics_server."
  }
}

variable "prometheus_retention" {
  description = "How long Prometheus keeps samples (Prometheus duration, e.g. 15d)"
  type        = string
  default     = "15d"
}

variable "prometheus_storage_gib" {
  description = "Size of Prometheus's volume, GiB"
  type        = number
  default     = 200
}
