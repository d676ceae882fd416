# One customer-managed key per purpose, so a key policy, a grant or a CloudTrail line names what it protects,
# and retiring one (a leaked Secrets Manager grant, say) does not touch the others. Rotation is on for all:
# AWS keeps every earlier backing key, so rotation never makes old ciphertext unreadable.
#
# The tenancy key-encryption key is kept in generations (var.tenancy_key_generations): AWS's own rotation
# keeps the old backing keys, so a data key wrapped before it (in an old SSTable, a backup) would still open.
# `parley keys rotate-kek` re-wraps every live data key under the newest generation; scheduling the old one's
# deletion then makes every copy wrapped under it useless (docs/operations.md, "Rotating the key-encryption
# key"). Nothing secret is in Terraform state: the KEKs never leave KMS.

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  account_root = "arn:${data.aws_partition.current.partition}:iam::${data.aws_caller_identity.current.account_id}:root"

  keys = {
    tenancy = "Parley tenancy key-encryption key: wraps each user's data key (DESIGN.md section 12)"
    s3      = "S3 SSE-KMS: the event archive and the documents buckets"
    kafka   = "MSK: broker storage at rest"
    eks     = "EKS: envelope encryption of Kubernetes Secrets"
    logs    = "CloudWatch Logs: VPC flow logs, EKS control plane and MSK broker logs"
    secrets = "Secrets Manager: Kafka SCRAM and Cassandra secrets"
    ecr     = "ECR: Parley's container images at rest"
  }
  purposes = { for name, about in local.keys : name => about if name != "tenancy" }
  active   = var.tenancy_key_generations[length(var.tenancy_key_generations) - 1]
}

data "aws_iam_policy_document" "key" {
  for_each = local.keys

  #checkov:skip=CKV_AWS_109:A key policy's Resource "*" is the key itself; the root statement hands use to IAM policies (AWS's default key policy)
  #checkov:skip=CKV_AWS_111:A key policy's Resource "*" is the key itself; the root statement hands use to IAM policies (AWS's default key policy)
  #checkov:skip=CKV_AWS_356:A key policy's Resource "*" is the key itself, not every resource
  statement {
    sid       = "AccountRootThroughIam"
    actions   = ["kms:*"]
    resources = ["*"]

    principals {
      type        = "AWS"
      identifiers = [local.account_root]
    }
  }

  dynamic "statement" {
    for_each = length(var.key_admin_arns) > 0 ? [1] : []

    content {
      sid = "KeyAdministrators"
      actions = [
        "kms:Create*", "kms:Describe*", "kms:Enable*", "kms:List*", "kms:Put*", "kms:Update*", "kms:Revoke*",
        "kms:Disable*", "kms:Get*", "kms:Delete*", "kms:TagResource", "kms:UntagResource",
        "kms:ScheduleKeyDeletion", "kms:CancelKeyDeletion", "kms:RotateKeyOnDemand",
      ]
      resources = ["*"]

      principals {
        type        = "AWS"
        identifiers = var.key_admin_arns
      }
    }
  }

  # CloudWatch Logs encrypts with the key itself, not with a caller's grant: it must be named in the policy,
  # and only for this account's log groups in this region.
  dynamic "statement" {
    for_each = each.key == "logs" ? [1] : []

    content {
      sid       = "CloudWatchLogsOfThisAccount"
      actions   = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
      resources = ["*"]

      principals {
        type        = "Service"
        identifiers = ["logs.${data.aws_region.current.region}.amazonaws.com"]
      }

      condition {
        test     = "ArnLike"
        variable = "kms:EncryptionContext:aws:logs:arn"
        values   = ["arn:${data.aws_partition.current.partition}:logs:${data.aws_region.current.region}:${data.aws_caller_identity.current.account_id}:log-group:*"]
      }
    }
  }
}

resource "aws_kms_key" "this" {
  for_each = local.purposes

  description             = "${var.name_prefix}: ${each.value}"
  key_usage               = "ENCRYPT_DECRYPT"
  enable_key_rotation     = true
  rotation_period_in_days = 365
  deletion_window_in_days = var.deletion_window_days
  policy                  = data.aws_iam_policy_document.key[each.key].json

  # Losing any of these keys loses the data under it. Removing one takes an edit here first.
  lifecycle {
    prevent_destroy = true
  }
}

resource "aws_kms_alias" "this" {
  for_each = local.purposes

  name          = "alias/${var.name_prefix}-${each.key}"
  target_key_id = aws_kms_key.this[each.key].key_id
}

resource "aws_kms_key" "tenancy" {
  for_each = toset(var.tenancy_key_generations)

  description             = "${var.name_prefix}: ${local.keys.tenancy}, generation ${each.key}"
  key_usage               = "ENCRYPT_DECRYPT"
  enable_key_rotation     = true
  rotation_period_in_days = 365
  deletion_window_in_days = var.deletion_window_days
  policy                  = data.aws_iam_policy_document.key["tenancy"].json

  # Deleting a generation while a live data key is wrapped under it loses that user's content. A retired one
  # leaves Terraform by `terraform state rm` once `parley keys rotate-kek` has moved every key off it, and
  # its deletion is scheduled by hand (infra/terraform/README.md): never by an apply.
  lifecycle {
    prevent_destroy = true
  }
}

# New data keys are wrapped under the newest generation (PARLEY_KMS_KEY_ID is its ARN); the alias follows it.
resource "aws_kms_alias" "tenancy" {
  name          = "alias/${var.name_prefix}-tenancy"
  target_key_id = aws_kms_key.tenancy[local.active].key_id
}

moved {
  from = aws_kms_key.this["tenancy"]
  to   = aws_kms_key.tenancy["1"]
}

moved {
  from = aws_kms_alias.this["tenancy"]
  to   = aws_kms_alias.tenancy
}
