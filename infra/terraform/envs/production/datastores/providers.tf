data "terraform_remote_state" "platform" {
  backend = "s3"

  config = {
    bucket = var.state_bucket
    region = var.state_region
    key    = "parley/production/platform.tfstate"
  }
}

data "terraform_remote_state" "addons" {
  backend = "s3"

  config = {
    bucket = var.state_bucket
    region = var.state_region
    key    = "parley/production/addons.tfstate"
  }
}

locals {
  platform = data.terraform_remote_state.platform.outputs
  addons   = data.terraform_remote_state.addons.outputs
}

provider "aws" {
  region = local.platform.region
}

provider "kubernetes" {
  host                   = local.platform.cluster_endpoint
  cluster_ca_certificate = base64decode(local.platform.cluster_ca_data)

  exec {
    api_version = "client.authentication.k8s.io/v1beta1"
    command     = "aws"
    args        = ["eks", "get-token", "--cluster-name", local.platform.cluster_name, "--region", local.platform.region]
  }
}
