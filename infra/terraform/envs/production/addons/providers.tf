# The cluster comes from the platform stack. Tokens come from `aws eks get-token` at each call, so a long
# apply (the Prometheus stack takes minutes) never outlives a token.

data "terraform_remote_state" "platform" {
  backend = "s3"

  config = {
    bucket = var.state_bucket
    region = var.state_region
    key    = "parley/production/platform.tfstate"
  }
}

locals {
  platform = data.terraform_remote_state.platform.outputs
  eks_token = {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "aws"
    args        = ["eks", "get-token", "--cluster-name", local.platform.cluster_name, "--region", local.platform.region]
  }
}

provider "kubernetes" {
  host                   = local.platform.cluster_endpoint
  cluster_ca_certificate = base64decode(local.platform.cluster_ca_data)

  exec {
    api_version = local.eks_token.api_version
    command     = local.eks_token.command
    args        = local.eks_token.args
  }
}

provider "helm" {
  kubernetes = {
    host                   = local.platform.cluster_endpoint
    cluster_ca_certificate = base64decode(local.platform.cluster_ca_data)
    exec                   = local.eks_token
  }
}
