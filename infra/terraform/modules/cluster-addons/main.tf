# What Parley's Kubernetes manifests assume is on the cluster, installed from pinned charts:
#   KEDA (lag-driven scaling of processors and workers), the Prometheus operator with Prometheus and Grafana
#   (kube-prometheus-stack: ServiceMonitors, the dashboard), LeaderWorkerSet (multi-node SGLang replicas),
#   the NVIDIA and EFA device plugins (GPUs and RDMA NICs as schedulable resources), cert-manager and the
#   K8ssandra operator (Cassandra), the cluster autoscaler (node groups follow pending pods) and
#   metrics-server (resource-metric HPAs).
# Plus the namespaces, and an encrypted gp3 StorageClass that Cassandra and Prometheus claim volumes from.

locals {
  # Pinned, so an apply months from now installs what was reviewed; bump deliberately. KEDA's and LWS's
  # charts carry the releases whose CRDs the rendered manifests are validated against
  # (tools/fleet/k8s_schemas.py CRD_SOURCES; tests/unit/infra/test_addon_versions.py), and the
  # kube-prometheus-stack major is the one released with prometheus-operator 0.85 (not checkable offline).
  chart_version = merge({
    cert_manager          = "v1.17.2"
    keda                  = "2.21.0"
    kube_prometheus_stack = "77.0.0"
    leader_worker_set     = "0.7.0"
    k8ssandra_operator    = "1.21.0"
    nvidia_device_plugin  = "0.17.1"
    efa_device_plugin     = "v0.5.6"
    cluster_autoscaler    = "9.46.0"
    metrics_server        = "3.12.2"
  }, var.chart_versions)

  gpu_tolerations = [{ key = "nvidia.com/gpu", operator = "Exists", effect = "NoSchedule" }]
  on_gpu_nodes = {
    nodeAffinity = {
      requiredDuringSchedulingIgnoredDuringExecution = {
        nodeSelectorTerms = [{ matchExpressions = [{ key = "parley.dev/gpu", operator = "Exists" }] }]
      }
    }
  }
}

resource "kubernetes_namespace_v1" "parley" {
  metadata {
    name   = var.parley_namespace
    labels = { "app.kubernetes.io/part-of" = "parley" }
  }
}

resource "kubernetes_namespace_v1" "cassandra" {
  metadata {
    name   = var.cassandra_namespace
    labels = { "app.kubernetes.io/part-of" = "parley" }
  }
}

resource "kubernetes_storage_class_v1" "gp3" {
  metadata {
    name        = "gp3-encrypted"
    annotations = { "storageclass.kubernetes.io/is-default-class" = "true" }
  }

  storage_provisioner    = "ebs.csi.aws.com"
  reclaim_policy         = "Retain"
  volume_binding_mode    = "WaitForFirstConsumer"
  allow_volume_expansion = true

  parameters = {
    type      = "gp3"
    encrypted = "true"
    fsType    = "xfs"
  }
}

resource "helm_release" "cert_manager" {
  name             = "cert-manager"
  repository       = "https://charts.jetstack.io"
  chart            = "cert-manager"
  version          = local.chart_version.cert_manager
  namespace        = "cert-manager"
  create_namespace = true
  atomic           = true

  values = [yamlencode({ crds = { enabled = true } })]
}

resource "helm_release" "keda" {
  name             = "keda"
  repository       = "https://kedacore.github.io/charts"
  chart            = "keda"
  version          = local.chart_version.keda
  namespace        = "keda"
  create_namespace = true
  atomic           = true
}

resource "random_password" "grafana_admin" {
  length  = 32
  special = false
}

resource "kubernetes_namespace_v1" "monitoring" {
  metadata {
    name = "monitoring"
  }
}

resource "kubernetes_secret_v1" "grafana_admin" {
  metadata {
    name      = "grafana-admin"
    namespace = kubernetes_namespace_v1.monitoring.metadata[0].name
  }

  data = {
    admin-user     = "admin"
    admin-password = random_password.grafana_admin.result
  }
}

resource "helm_release" "kube_prometheus_stack" {
  name       = "kube-prometheus-stack"
  repository = "https://prometheus-community.github.io/helm-charts"
  chart      = "kube-prometheus-stack"
  version    = local.chart_version.kube_prometheus_stack
  namespace  = kubernetes_namespace_v1.monitoring.metadata[0].name
  atomic     = true
  timeout    = 900

  values = [yamlencode({
    prometheus = {
      prometheusSpec = {
        # Select every ServiceMonitor and PodMonitor in the cluster, not only the chart's own: Parley's
        # manifests carry no release label.
        serviceMonitorSelectorNilUsesHelmValues = false
        podMonitorSelectorNilUsesHelmValues     = false
        ruleSelectorNilUsesHelmValues           = false
        retention                               = var.prometheus_retention
        storageSpec = {
          volumeClaimTemplate = {
            spec = {
              storageClassName = kubernetes_storage_class_v1.gp3.metadata[0].name
              accessModes      = ["ReadWriteOnce"]
              resources        = { requests = { storage = "${var.prometheus_storage_gib}Gi" } }
            }
          }
        }
      }
    }
    grafana = {
      admin = { existingSecret = kubernetes_secret_v1.grafana_admin.metadata[0].name }
      # Dashboards are ConfigMaps labelled grafana_dashboard=1 in any namespace (Parley's ships in parley).
      sidecar = { dashboards = { enabled = true, label = "grafana_dashboard", labelValue = "1", searchNamespace = "ALL" } }
    }
  })]
}

resource "helm_release" "leader_worker_set" {
  name             = "lws"
  repository       = "oci://registry.k8s.io/lws/charts"
  chart            = "lws"
  version          = local.chart_version.leader_worker_set
  namespace        = "lws-system"
  create_namespace = true
  atomic           = true
}

resource "helm_release" "nvidia_device_plugin" {
  name             = "nvidia-device-plugin"
  repository       = "https://nvidia.github.io/k8s-device-plugin"
  chart            = "nvidia-device-plugin"
  version          = local.chart_version.nvidia_device_plugin
  namespace        = "nvidia-device-plugin"
  create_namespace = true
  atomic           = true

  # The chart's default affinity waits for Node Feature Discovery labels; Parley's GPU nodes are labelled
  # by their node group instead.
  values = [yamlencode({ tolerations = local.gpu_tolerations, affinity = local.on_gpu_nodes })]
}

resource "helm_release" "efa_device_plugin" {
  name       = "aws-efa-k8s-device-plugin"
  repository = "https://aws.github.io/eks-charts"
  chart      = "aws-efa-k8s-device-plugin"
  version    = local.chart_version.efa_device_plugin
  namespace  = "kube-system"
  atomic     = true

  values = [yamlencode({ tolerations = local.gpu_tolerations, affinity = local.on_gpu_nodes })]
}

resource "helm_release" "k8ssandra_operator" {
  name             = "k8ssandra-operator"
  repository       = "https://helm.k8ssandra.io/stable"
  chart            = "k8ssandra-operator"
  version          = local.chart_version.k8ssandra_operator
  namespace        = "k8ssandra-operator"
  create_namespace = true
  atomic           = true

  # Cluster-scoped, so it reconciles the K8ssandraCluster in var.cassandra_namespace.
  values = [yamlencode({ global = { clusterScoped = true } })]

  depends_on = [helm_release.cert_manager]
}

resource "helm_release" "cluster_autoscaler" {
  name       = "cluster-autoscaler"
  repository = "https://kubernetes.github.io/autoscaler"
  chart      = "cluster-autoscaler"
  version    = local.chart_version.cluster_autoscaler
  namespace  = "kube-system"
  atomic     = true

  values = [yamlencode({
    cloudProvider = "aws"
    awsRegion     = var.region
    autoDiscovery = { clusterName = var.cluster_name }
    # Its IAM role comes through the Pod Identity association the platform stack made for this name.
    rbac  = { serviceAccount = { create = true, name = "cluster-autoscaler" } }
    image = { tag = "v${var.kubernetes_version}.0" }
    extraArgs = {
      balance-similar-node-groups   = true
      expander                      = "least-waste"
      skip-nodes-with-local-storage = false
    }
  })]
}

resource "helm_release" "metrics_server" {
  name       = "metrics-server"
  repository = "https://kubernetes-sigs.github.io/metrics-server/"
  chart      = "metrics-server"
  version    = local.chart_version.metrics_server
  namespace  = "kube-system"
  atomic     = true
}
