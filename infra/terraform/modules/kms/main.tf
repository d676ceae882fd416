# One customer-managed key per purpose, so a key policy, a grant or a CloudTrail line names what it protects,
# and retiring one (a leaked Secrets Manager grant, say) does not touch the others. Rotation is on for all:
# AWS keeps every earlier backing key, so rotation never makes old ciphertext unreadable.

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
    secrets = "Secrets Manager: Kafka SCRAM, Cassandra and interim KEK secrets"
    ecr     = "ECR: Parley's container images at rest"
  }
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
  for_each = local.keys

  description             = "${var.name_prefix}: ${each.value}"
  key_usage               = "ENCRYPT_DECRYPT"
  enable_key_rotation     = true
  rotation_period_in_days = 365
  deletion_window_in_days = var.deletion_window_days
  policy                  = data.aws_iam_policy_document.key[each.key].json

  # Losing any of these keys loses the data under it (for the tenancy key: every sealed message). Removing
  # one takes an edit here first.
  lifecycle {
    prevent_destroy = true
  }
}

resource "aws_kms_alias" "this" {
  for_each = local.keys

  name          = "alias/${var.name_prefix}-${each.key}"
  target_key_id = aws_kms_key.this[each.key].key_id
}

# Until a cloud KMS adapter ships (parley/keys.py implements only PARLEY_KMS=local), every Parley process
# reads one LocalKms key file. Its key-encryption key is made here, once, and kept in Secrets Manager under
# the tenancy key, so it exists before the first pod and every pod mounts the same one (the datastores stack
# copies it into a Kubernetes Secret). Format: parley/keys.py LocalKms.
resource "random_bytes" "interim_kek" {
  length = 32

  lifecycle {
    prevent_destroy = true
  }
}

resource "aws_secretsmanager_secret" "interim_kek" {
  #checkov:skip=CKV2_AWS_57:A KEK is rotated by adding a key to the file and making it active (LocalKms), not by replacing the secret; a Lambda rotation would orphan every wrapped data key
  name                    = "${var.name_prefix}/parley/local-kms-kek"
  description             = "Parley LocalKms key file (PARLEY_KMS_KEY_FILE): the interim tenancy KEK until a cloud KMS adapter ships"
  kms_key_id              = aws_kms_key.this["tenancy"].arn
  recovery_window_in_days = 30
}

resource "aws_secretsmanager_secret_version" "interim_kek" {
  secret_id = aws_secretsmanager_secret.interim_kek.id
  secret_string = jsonencode({
    active = "kek-1"
    keys   = { "kek-1" = random_bytes.interim_kek.base64 }
  })
}
