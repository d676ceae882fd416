# One IAM role per Parley service account, taken by its pods through EKS Pod Identity (no annotation on the
# service account, no OIDC provider: the association below binds namespace/name to the role). Each role is
# the union of its capabilities' statements.

data "aws_region" "current" {}

locals {
  # MSK names topics, groups and transactional ids under the cluster's name/uuid.
  kafka_scope = split(":cluster/", var.kafka_cluster_arn)
}

data "aws_iam_policy_document" "tenancy_kek" {
  # parley/kms.py AwsKms's wrap and unwrap: Encrypt and Decrypt of a data key, always with the owner's
  # user_id as encryption context (and nothing else), so a wrapped key opens only for its owner. New keys
  # are wrapped under the newest generation only; any live generation unwraps (a rotation in progress).
  statement {
    sid       = "WrapUnderTheNewestGeneration"
    actions   = ["kms:Encrypt"]
    resources = [var.tenancy_kms_key_arn]

    condition {
      test     = "Null"
      variable = "kms:EncryptionContext:user_id"
      values   = ["false"]
    }

    condition {
      test     = "ForAllValues:StringEquals"
      variable = "kms:EncryptionContextKeys"
      values   = ["user_id"]
    }
  }

  statement {
    sid       = "UnwrapUnderAnyLiveGeneration"
    actions   = ["kms:Decrypt"]
    resources = var.tenancy_kms_key_arns

    condition {
      test     = "Null"
      variable = "kms:EncryptionContext:user_id"
      values   = ["false"]
    }

    condition {
      test     = "ForAllValues:StringEquals"
      variable = "kms:EncryptionContextKeys"
      values   = ["user_id"]
    }
  }
}

data "aws_iam_policy_document" "bucket" {
  for_each = {
    documents = var.documents_bucket_arn
    archive   = var.archive_bucket_arn
  }

  statement {
    actions   = ["s3:ListBucket"]
    resources = [each.value]
  }

  statement {
    actions   = ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"]
    resources = ["${each.value}/*"]
  }

  statement {
    actions   = ["kms:GenerateDataKey", "kms:Decrypt"]
    resources = [var.s3_kms_key_arn]

    condition {
      test     = "StringEquals"
      variable = "kms:ViaService"
      values   = ["s3.${data.aws_region.current.region}.amazonaws.com"]
    }
  }
}

data "aws_iam_policy_document" "kafka_admin" {
  statement {
    actions = [
      "kafka-cluster:Connect",
      "kafka-cluster:DescribeCluster",
      "kafka-cluster:AlterCluster",
      "kafka-cluster:DescribeClusterDynamicConfiguration",
    ]
    resources = [var.kafka_cluster_arn]
  }

  statement {
    actions = [
      "kafka-cluster:*Topic*",
      "kafka-cluster:ReadData",
      "kafka-cluster:DescribeGroup",
      "kafka-cluster:AlterGroup",
      "kafka-cluster:DescribeTransactionalId",
    ]
    resources = [
      "${local.kafka_scope[0]}:topic/${local.kafka_scope[1]}/*",
      "${local.kafka_scope[0]}:group/${local.kafka_scope[1]}/*",
      "${local.kafka_scope[0]}:transactional-id/${local.kafka_scope[1]}/*",
    ]
  }
}

locals {
  capability_policy = {
    tenancy-kek = data.aws_iam_policy_document.tenancy_kek.json
    documents   = data.aws_iam_policy_document.bucket["documents"].json
    archive     = data.aws_iam_policy_document.bucket["archive"].json
    kafka-admin = data.aws_iam_policy_document.kafka_admin.json
  }
}

data "aws_iam_policy_document" "service_account" {
  for_each = var.service_accounts

  source_policy_documents = [for c in each.value : local.capability_policy[c]]
}

data "aws_iam_policy_document" "assume" {
  statement {
    actions = ["sts:AssumeRole", "sts:TagSession"]

    principals {
      type        = "Service"
      identifiers = ["pods.eks.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "service_account" {
  for_each = var.service_accounts

  name               = "${var.name_prefix}-${each.key}"
  description        = "Parley pods running as ${var.namespace}/${each.key}: ${join(", ", each.value)}"
  assume_role_policy = data.aws_iam_policy_document.assume.json
}

resource "aws_iam_role_policy" "service_account" {
  for_each = { for name, caps in var.service_accounts : name => caps if length(caps) > 0 }

  name   = "parley"
  role   = aws_iam_role.service_account[each.key].id
  policy = data.aws_iam_policy_document.service_account[each.key].json
}

resource "aws_eks_pod_identity_association" "service_account" {
  for_each = var.service_accounts

  cluster_name    = var.cluster_name
  namespace       = var.namespace
  service_account = each.key
  role_arn        = aws_iam_role.service_account[each.key].arn
}
