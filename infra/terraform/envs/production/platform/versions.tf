terraform {
  required_version = ">= 1.10"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = "~> 6.25"
    }
    random = {
      source  = "hashicorp/random"
      version = "~> 3.7"
    }
  }

  # The bucket (and region) are given at init: `terraform init -backend-config=../backend.hcl`.
  backend "s3" {
    key          = "parley/production/platform.tfstate"
    encrypt      = true
    use_lockfile = true
  }
}
