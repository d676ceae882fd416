# One SCRAM-SHA-512 user per entry of var.scram_users. MSK reads the password from Secrets Manager: the
# secret's name must start with AmazonMSK_ and it must be under a customer-managed key.

resource "random_password" "scram" {
  for_each = toset(var.scram_users)

  length  = 40
  special = false
}

resource "aws_secretsmanager_secret" "scram" {
  for_each = toset(var.scram_users)

  #checkov:skip=CKV2_AWS_57:MSK holds the SCRAM credential itself; a rotation must also update the Kubernetes Secret and restart the clients, so it is the README's manual procedure, not a Lambda
  name                    = "AmazonMSK_${var.name}_${each.key}"
  description             = "SCRAM-SHA-512 credentials of Kafka user ${each.key} on ${var.name}"
  kms_key_id              = var.secrets_kms_key_arn
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "scram" {
  for_each = toset(var.scram_users)

  secret_id     = aws_secretsmanager_secret.scram[each.key].id
  secret_string = jsonencode({ username = each.key, password = random_password.scram[each.key].result })
}

data "aws_iam_policy_document" "scram_secret" {
  for_each = toset(var.scram_users)

  #checkov:skip=CKV_AWS_108:The only reader is MSK itself (service principal kafka.amazonaws.com) of this one secret: how MSK reads SCRAM credentials
  statement {
    sid       = "AWSKafkaResourcePolicy"
    actions   = ["secretsmanager:getSecretValue"]
    resources = [aws_secretsmanager_secret.scram[each.key].arn]

    principals {
      type        = "Service"
      identifiers = ["kafka.amazonaws.com"]
    }
  }
}

resource "aws_secretsmanager_secret_policy" "scram" {
  for_each = toset(var.scram_users)

  secret_arn = aws_secretsmanager_secret.scram[each.key].arn
  policy     = data.aws_iam_policy_document.scram_secret[each.key].json
}

resource "aws_msk_scram_secret_association" "this" {
  cluster_arn     = aws_msk_cluster.this.arn
  secret_arn_list = [for user in var.scram_users : aws_secretsmanager_secret.scram[user].arn]

  depends_on = [aws_secretsmanager_secret_version.scram, aws_secretsmanager_secret_policy.scram]
}
