# The operators and add-ons Parley's Kubernetes manifests assume, on the platform stack's cluster. A stack of
# its own because the Kubernetes and Helm providers need the cluster to exist before they can plan, and the
# datastores stack's custom resources need these CRDs to exist before it can plan.

module "cluster_addons" {
  source = "../../../modules/cluster-addons"

  cluster_name       = local.platform.cluster_name
  region             = local.platform.region
  kubernetes_version = local.platform.kubernetes_version
  chart_versions     = var.chart_versions
}
