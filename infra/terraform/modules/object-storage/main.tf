# Two data buckets, one log bucket.
#   archive:   `parley archive` copies closed Kafka segments here (PARLEY_ARCHIVE_URL), replay and rebuild read it.
#   documents: uploaded originals, sealed by Parley before they arrive (PARLEY_DOCUMENTS_BLOB_URL).
# Both are ./bucket: SSE-KMS under the S3 key with bucket keys, versioned, no public access, no ACLs, TLS
# only, access logged. Server access logs cannot be written under SSE-KMS, so the log bucket uses SSE-S3.

data "aws_caller_identity" "current" {}
data "aws_region" "current" {}

locals {
  suffix = "${data.aws_caller_identity.current.account_id}-${data.aws_region.current.region}"
}

module "archive" {
  source = "./bucket"

  name                    = "${var.name_prefix}-archive-${local.suffix}"
  kms_key_arn             = var.kms_key_arn
  log_bucket              = aws_s3_bucket.logs.id
  log_prefix              = "archive/"
  transitions             = var.archive_transitions
  noncurrent_version_days = var.noncurrent_version_days
}

module "documents" {
  source = "./bucket"

  name                    = "${var.name_prefix}-documents-${local.suffix}"
  kms_key_arn             = var.kms_key_arn
  log_bucket              = aws_s3_bucket.logs.id
  log_prefix              = "documents/"
  noncurrent_version_days = var.noncurrent_version_days
}

# ------------------------------------------------------------------ access logs

resource "aws_s3_bucket" "logs" {
  #checkov:skip=CKV_AWS_18:This is the access-log target; logging its own access would log forever
  #checkov:skip=CKV_AWS_144:One region by design; access logs are not replicated
  #checkov:skip=CKV_AWS_145:S3 server access logging cannot deliver to a bucket whose default encryption is SSE-KMS; SSE-S3 it is
  #checkov:skip=CKV2_AWS_62:Nothing consumes events of the log bucket
  bucket = "${var.name_prefix}-s3-access-logs-${local.suffix}"
}

resource "aws_s3_bucket_ownership_controls" "logs" {
  bucket = aws_s3_bucket.logs.id

  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_public_access_block" "logs" {
  bucket                  = aws_s3_bucket.logs.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_versioning" "logs" {
  bucket = aws_s3_bucket.logs.id

  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "logs" {
  bucket = aws_s3_bucket.logs.id

  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "logs" {
  bucket = aws_s3_bucket.logs.id

  rule {
    id     = "expire-logs"
    status = "Enabled"

    filter {}

    expiration {
      days = var.access_log_retention_days
    }

    noncurrent_version_expiration {
      noncurrent_days = 7
    }

    abort_incomplete_multipart_upload {
      days_after_initiation = 7
    }
  }

  depends_on = [aws_s3_bucket_versioning.logs]
}

data "aws_iam_policy_document" "logs" {
  statement {
    sid       = "S3ServerAccessLogs"
    actions   = ["s3:PutObject"]
    resources = ["${aws_s3_bucket.logs.arn}/*"]

    principals {
      type        = "Service"
      identifiers = ["logging.s3.amazonaws.com"]
    }

    condition {
      test     = "ArnLike"
      variable = "aws:SourceArn"
      values   = [module.archive.arn, module.documents.arn]
    }

    condition {
      test     = "StringEquals"
      variable = "aws:SourceAccount"
      values   = [data.aws_caller_identity.current.account_id]
    }
  }

  statement {
    sid       = "DenyInsecureTransport"
    effect    = "Deny"
    actions   = ["s3:*"]
    resources = [aws_s3_bucket.logs.arn, "${aws_s3_bucket.logs.arn}/*"]

    principals {
      type        = "*"
      identifiers = ["*"]
    }

    condition {
      test     = "Bool"
      variable = "aws:SecureTransport"
      values   = ["false"]
    }
  }
}

resource "aws_s3_bucket_policy" "logs" {
  bucket = aws_s3_bucket.logs.id
  policy = data.aws_iam_policy_document.logs.json

  depends_on = [aws_s3_bucket_public_access_block.logs]
}
