# The control plane (private endpoint, every log type, Secrets under a customer key) and the node groups:
# one for the CPU services, one per AZ for Cassandra (dedicated: tainted, so its disks and page cache are
# its own), and one per GPU group of var.gpu_node_groups (tainted nvidia.com/gpu=present:NoSchedule).

locals {
  gpu_label   = "parley.dev/gpu"
  gpu_taint   = { key = "nvidia.com/gpu", value = "present", effect = "NO_SCHEDULE" }
  cassandra   = { key = "parley.dev/dedicated", value = "cassandra", effect = "NO_SCHEDULE" }
  az_subnet   = zipmap(var.availability_zones, var.subnet_ids)
  per_az_cass = var.cassandra_node_group.nodes / length(var.availability_zones)

  node_groups = merge(
    {
      general = {
        ami_type       = "AL2023_x86_64_STANDARD"
        instance_types = var.cpu_node_group.instance_types
        min_size       = var.cpu_node_group.min_size
        desired_size   = var.cpu_node_group.desired_size
        max_size       = var.cpu_node_group.max_size
        disk_gib       = var.cpu_node_group.disk_gib
        capacity_type  = "ON_DEMAND"
        subnet_ids     = var.subnet_ids
        labels         = { "parley.dev/role" = "general" }
        taints         = []
        efa_interfaces = 0
        autoscaled     = true
      }
    },
    {
      for az in var.availability_zones : "cassandra-${az}" => {
        ami_type       = "AL2023_x86_64_STANDARD"
        instance_types = [var.cassandra_node_group.instance_type]
        min_size       = local.per_az_cass
        desired_size   = local.per_az_cass
        max_size       = local.per_az_cass
        disk_gib       = var.cassandra_node_group.disk_gib
        capacity_type  = "ON_DEMAND"
        subnet_ids     = [local.az_subnet[az]]
        labels         = { "parley.dev/role" = "cassandra" }
        taints         = [local.cassandra]
        efa_interfaces = 0
        autoscaled     = false
      }
    },
    {
      for name, g in var.gpu_node_groups : "gpu-${name}" => {
        ami_type       = "AL2023_x86_64_NVIDIA"
        instance_types = [g.instance_type]
        min_size       = g.min_size
        desired_size   = g.desired_size
        max_size       = g.max_size
        disk_gib       = g.disk_gib
        capacity_type  = g.capacity_type
        # EFA needs every node of a group in one placement group, so in one AZ.
        subnet_ids = g.efa_interfaces > 0 ? [var.subnet_ids[0]] : var.subnet_ids
        labels = {
          (local.gpu_label)        = g.gpu_type
          "parley.dev/pool"        = g.pool
          "nvidia.com/gpu.product" = g.gpu_product
          "parley.dev/role"        = "gpu"
        }
        taints         = [local.gpu_taint]
        efa_interfaces = g.efa_interfaces
        autoscaled     = true
      }
    },
  )
}

resource "aws_cloudwatch_log_group" "cluster" {
  # EKS writes to exactly this name; made first so it has a key and a retention.
  name              = "/aws/eks/${var.cluster_name}/cluster"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.logs_kms_key_arn
}

resource "aws_eks_cluster" "this" {
  name     = var.cluster_name
  version  = var.kubernetes_version
  role_arn = aws_iam_role.cluster.arn

  # Deleting the cluster takes turning this off first (as for the KMS keys' prevent_destroy).
  deletion_protection = true

  enabled_cluster_log_types = ["api", "audit", "authenticator", "controllerManager", "scheduler"]

  access_config {
    authentication_mode                         = "API"
    bootstrap_cluster_creator_admin_permissions = true
  }

  vpc_config {
    subnet_ids              = var.subnet_ids
    endpoint_private_access = true
    endpoint_public_access  = var.endpoint_public_access
    public_access_cidrs     = var.endpoint_public_access ? var.public_access_cidrs : null
  }

  encryption_config {
    resources = ["secrets"]

    provider {
      key_arn = var.secrets_kms_key_arn
    }
  }

  upgrade_policy {
    support_type = "STANDARD"
  }

  depends_on = [
    aws_iam_role_policy_attachment.cluster,
    aws_cloudwatch_log_group.cluster,
  ]
}

resource "aws_eks_access_entry" "admin" {
  for_each = toset(var.admin_role_arns)

  cluster_name  = aws_eks_cluster.this.name
  principal_arn = each.value
}

resource "aws_eks_access_policy_association" "admin" {
  for_each = toset(var.admin_role_arns)

  cluster_name  = aws_eks_cluster.this.name
  principal_arn = each.value
  policy_arn    = "arn:${data.aws_partition.current.partition}:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"

  access_scope {
    type = "cluster"
  }

  depends_on = [aws_eks_access_entry.admin]
}

resource "aws_placement_group" "efa" {
  for_each = { for name, g in local.node_groups : name => g if g.efa_interfaces > 0 }

  name     = "${var.cluster_name}-${each.key}"
  strategy = "cluster"
}

resource "aws_launch_template" "node" {
  for_each = local.node_groups

  name_prefix            = "${var.cluster_name}-${each.key}-"
  update_default_version = true

  block_device_mappings {
    device_name = "/dev/xvda"

    ebs {
      volume_size           = each.value.disk_gib
      volume_type           = "gp3"
      encrypted             = true
      delete_on_termination = true
    }
  }

  # IMDSv2 only, one hop: the node's own agents reach it, pods (one hop further) do not.
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  monitoring {
    enabled = true
  }

  dynamic "placement" {
    for_each = each.value.efa_interfaces > 0 ? [1] : []

    content {
      group_name = aws_placement_group.efa[each.key].name
    }
  }

  # The first interface carries IP traffic and EFA, the others EFA only (one per network card).
  dynamic "network_interfaces" {
    for_each = range(each.value.efa_interfaces)

    content {
      device_index          = network_interfaces.value == 0 ? 0 : 1
      network_card_index    = network_interfaces.value
      interface_type        = network_interfaces.value == 0 ? "efa" : "efa-only"
      security_groups       = [aws_eks_cluster.this.vpc_config[0].cluster_security_group_id]
      delete_on_termination = true
    }
  }

  tag_specifications {
    resource_type = "instance"
    tags          = { Name = "${var.cluster_name}-${each.key}" }
  }
}

resource "aws_eks_node_group" "this" {
  for_each = { for name, g in local.node_groups : name => g if g.autoscaled }

  cluster_name    = aws_eks_cluster.this.name
  node_group_name = each.key
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = each.value.subnet_ids
  ami_type        = each.value.ami_type
  instance_types  = each.value.instance_types
  capacity_type   = each.value.capacity_type
  labels          = each.value.labels

  scaling_config {
    min_size     = each.value.min_size
    desired_size = each.value.desired_size
    max_size     = each.value.max_size
  }

  update_config {
    max_unavailable = 1
  }

  launch_template {
    id      = aws_launch_template.node[each.key].id
    version = aws_launch_template.node[each.key].latest_version
  }

  dynamic "taint" {
    for_each = each.value.taints

    content {
      key    = taint.value.key
      value  = taint.value.value
      effect = taint.value.effect
    }
  }

  # The cluster autoscaler owns desired_size once the group exists.
  lifecycle {
    ignore_changes = [scaling_config[0].desired_size]
  }

  depends_on = [aws_iam_role_policy_attachment.node]
}

# Cassandra's groups are fixed in size (each node is a replica holding data): no autoscaler, so Terraform
# keeps owning desired_size and a change of var.cassandra_node_group.nodes resizes them.
resource "aws_eks_node_group" "cassandra" {
  for_each = { for name, g in local.node_groups : name => g if !g.autoscaled }

  cluster_name    = aws_eks_cluster.this.name
  node_group_name = each.key
  node_role_arn   = aws_iam_role.node.arn
  subnet_ids      = each.value.subnet_ids
  ami_type        = each.value.ami_type
  instance_types  = each.value.instance_types
  capacity_type   = each.value.capacity_type
  labels          = each.value.labels

  scaling_config {
    min_size     = each.value.min_size
    desired_size = each.value.desired_size
    max_size     = each.value.max_size
  }

  update_config {
    max_unavailable = 1
  }

  launch_template {
    id      = aws_launch_template.node[each.key].id
    version = aws_launch_template.node[each.key].latest_version
  }

  dynamic "taint" {
    for_each = each.value.taints

    content {
      key    = taint.value.key
      value  = taint.value.value
      effect = taint.value.effect
    }
  }

  depends_on = [aws_iam_role_policy_attachment.node]
}

# The cluster autoscaler scales a GPU group up from zero only if it knows, before any node exists, that a
# node would carry the label, the taint and the GPUs a pending pod asks for: these ASG tags tell it.
locals {
  gpu_asg_tags = merge([
    for name, g in var.gpu_node_groups : {
      "${name}/label" = {
        group = "gpu-${name}"
        key   = "k8s.io/cluster-autoscaler/node-template/label/${local.gpu_label}"
        value = g.gpu_type
      }
      "${name}/taint" = {
        group = "gpu-${name}"
        key   = "k8s.io/cluster-autoscaler/node-template/taint/${local.gpu_taint.key}"
        value = "${local.gpu_taint.value}:NoSchedule"
      }
      "${name}/gpus" = {
        group = "gpu-${name}"
        key   = "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu"
        value = tostring(g.gpus_per_node)
      }
    }
  ]...)
}

resource "aws_autoscaling_group_tag" "gpu_node_template" {
  for_each = local.gpu_asg_tags

  autoscaling_group_name = aws_eks_node_group.this[each.value.group].resources[0].autoscaling_groups[0].name

  tag {
    key                 = each.value.key
    value               = each.value.value
    propagate_at_launch = false
  }
}

resource "aws_eks_addon" "pod_identity_agent" {
  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = "eks-pod-identity-agent"
  resolve_conflicts_on_create = "OVERWRITE"
  resolve_conflicts_on_update = "OVERWRITE"
}

resource "aws_eks_addon" "core" {
  for_each = toset(["vpc-cni", "kube-proxy", "coredns"])

  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = each.value
  resolve_conflicts_on_create = "OVERWRITE"
  resolve_conflicts_on_update = "OVERWRITE"

  # CoreDNS needs nodes to become healthy.
  depends_on = [aws_eks_node_group.this, aws_eks_node_group.cassandra]
}

resource "aws_eks_addon" "ebs_csi" {
  cluster_name                = aws_eks_cluster.this.name
  addon_name                  = "aws-ebs-csi-driver"
  resolve_conflicts_on_create = "OVERWRITE"
  resolve_conflicts_on_update = "OVERWRITE"

  pod_identity_association {
    role_arn        = aws_iam_role.ebs_csi.arn
    service_account = "ebs-csi-controller-sa"
  }

  depends_on = [aws_eks_node_group.this, aws_eks_node_group.cassandra, aws_eks_addon.pod_identity_agent]
}

resource "aws_eks_pod_identity_association" "cluster_autoscaler" {
  cluster_name    = aws_eks_cluster.this.name
  namespace       = "kube-system"
  service_account = "cluster-autoscaler"
  role_arn        = aws_iam_role.cluster_autoscaler.arn
}
