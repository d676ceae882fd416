provider "aws" {
  region = var.region

  default_tags {
    tags = merge(var.tags, {
      "parley:environment" = var.environment
      "parley:stack"       = "platform"
      "managed-by"         = "terraform"
    })
  }
}
