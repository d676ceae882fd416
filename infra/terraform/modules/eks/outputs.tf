output "cluster_name" {
  description = "Name of the EKS cluster"
  value       = aws_eks_cluster.this.name
}

output "cluster_arn" {
  description = "ARN of the EKS cluster"
  value       = aws_eks_cluster.this.arn
}

output "cluster_endpoint" {
  description = "URL of the Kubernetes API server"
  value       = aws_eks_cluster.this.endpoint
}

output "cluster_ca_data" {
  description = "Base64 PEM of the cluster's certificate authority"
  value       = aws_eks_cluster.this.certificate_authority[0].data
}

output "cluster_security_group_id" {
  description = "The security group EKS puts on the control plane and every managed node"
  value       = aws_eks_cluster.this.vpc_config[0].cluster_security_group_id
}

output "node_role_arn" {
  description = "IAM role of every node"
  value       = aws_iam_role.node.arn
}

output "gpu_node_labels" {
  description = "Labels of each GPU node group by name, as the Kubernetes manifests select them"
  value       = { for name, g in var.gpu_node_groups : name => local.node_groups["gpu-${name}"].labels }
}

output "cassandra_node_selector" {
  description = "Label and taint of the dedicated Cassandra nodes (the K8ssandraCluster's affinity and toleration)"
  value = {
    label = { "parley.dev/role" = "cassandra" }
    taint = local.cassandra
  }
}
