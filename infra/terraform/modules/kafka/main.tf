# Amazon MSK, provisioned: TLS everywhere, SCRAM-SHA-512 users for Parley and KEDA (passwords generated into
# Secrets Manager), IAM authentication for the operators' admin client (ACLs, `parley topics`), optional
# mutual TLS, brokers in private subnets only, logs to CloudWatch, storage that grows by itself.
# Topics are not created here: `parley topics` creates and checks them against schemas/catalog.py.

locals {
  # The broker defaults Parley's guarantees rest on (DESIGN.md section 5); per-topic retention and compaction
  # come from the catalog.
  server_properties = {
    "auto.create.topics.enable"                = "false"
    "default.replication.factor"               = "3"
    "min.insync.replicas"                      = "2"
    "unclean.leader.election.enable"           = "false"
    "offsets.topic.replication.factor"         = "3"
    "transaction.state.log.replication.factor" = "3"
    "transaction.state.log.min.isr"            = "2"
    "allow.everyone.if.no.acl.found"           = var.acl_deny_by_default ? "false" : "true"
    "num.partitions"                           = "6"
    "log.retention.hours"                      = "168"
  }
}

resource "aws_msk_configuration" "this" {
  # A new Kafka version needs a new configuration; the version in the name lets both exist during the switch.
  name              = "${var.name}-${replace(var.kafka_version, ".", "-")}"
  kafka_versions    = [var.kafka_version]
  description       = "Parley broker defaults: RF 3, min ISR 2, no auto-created topics, no unclean elections"
  server_properties = join("\n", [for k, v in local.server_properties : "${k}=${v}"])

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_security_group" "brokers" {
  name        = "${var.name}-msk"
  description = "MSK brokers of ${var.name}: TLS listeners from the cluster only"
  vpc_id      = var.vpc_id

  tags = { Name = "${var.name}-msk" }
}

locals {
  # 9096: SASL/SCRAM over TLS, 9098: IAM over TLS, 9094: mutual TLS.
  listener_ports = { scram = 9096, iam = 9098, mtls = 9094 }
  ingress = merge([
    # Keyed by position: the groups' IDs may not be known until the cluster exists.
    for i, sg in var.client_security_group_ids : {
      for listener, port in local.listener_ports : "${i}/${listener}" => { sg = sg, port = port, listener = listener }
      if listener != "mtls" || length(var.tls_certificate_authority_arns) > 0
    }
  ]...)
}

resource "aws_vpc_security_group_ingress_rule" "clients" {
  for_each = local.ingress

  security_group_id            = aws_security_group.brokers.id
  referenced_security_group_id = each.value.sg
  ip_protocol                  = "tcp"
  from_port                    = each.value.port
  to_port                      = each.value.port
  description                  = "Kafka ${each.value.listener} listener over TLS from the cluster"
}

resource "aws_cloudwatch_log_group" "brokers" {
  name              = "/aws/msk/${var.name}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.logs_kms_key_arn
}

resource "aws_msk_cluster" "this" {
  cluster_name           = var.name
  kafka_version          = var.kafka_version
  number_of_broker_nodes = var.broker_count
  enhanced_monitoring    = "PER_TOPIC_PER_BROKER"

  broker_node_group_info {
    instance_type   = var.broker_instance_type
    client_subnets  = var.subnet_ids
    security_groups = [aws_security_group.brokers.id]

    storage_info {
      ebs_storage_info {
        volume_size = var.broker_volume_gib
      }
    }

    connectivity_info {
      public_access {
        type = "DISABLED"
      }
    }
  }

  configuration_info {
    arn      = aws_msk_configuration.this.arn
    revision = aws_msk_configuration.this.latest_revision
  }

  client_authentication {
    unauthenticated = false

    sasl {
      scram = true
      iam   = true
    }

    dynamic "tls" {
      for_each = length(var.tls_certificate_authority_arns) > 0 ? [1] : []

      content {
        certificate_authority_arns = var.tls_certificate_authority_arns
      }
    }
  }

  encryption_info {
    encryption_at_rest_kms_key_arn = var.kafka_kms_key_arn

    encryption_in_transit {
      client_broker = "TLS"
      in_cluster    = true
    }
  }

  logging_info {
    broker_logs {
      cloudwatch_logs {
        enabled   = true
        log_group = aws_cloudwatch_log_group.brokers.name
      }
    }
  }

  # JMX and node exporters on the brokers, for the cluster's Prometheus to scrape.
  open_monitoring {
    prometheus {
      jmx_exporter {
        enabled_in_broker = true
      }

      node_exporter {
        enabled_in_broker = true
      }
    }
  }

  lifecycle {
    precondition {
      condition     = var.broker_count % length(var.subnet_ids) == 0
      error_message = "broker_count must be a multiple of the number of subnets (MSK places the same number of brokers in each AZ)."
    }

    # Storage autoscaling below grows the volumes; a plan must not shrink them back.
    ignore_changes = [broker_node_group_info[0].storage_info[0].ebs_storage_info[0].volume_size]
  }
}

resource "aws_appautoscaling_target" "storage" {
  service_namespace  = "kafka"
  resource_id        = aws_msk_cluster.this.arn
  scalable_dimension = "kafka:broker-storage:VolumeSize"
  min_capacity       = 1
  max_capacity       = var.broker_volume_max_gib
}

resource "aws_appautoscaling_policy" "storage" {
  name               = "${var.name}-broker-storage"
  policy_type        = "TargetTrackingScaling"
  service_namespace  = aws_appautoscaling_target.storage.service_namespace
  resource_id        = aws_appautoscaling_target.storage.resource_id
  scalable_dimension = aws_appautoscaling_target.storage.scalable_dimension

  target_tracking_scaling_policy_configuration {
    target_value = 70

    predefined_metric_specification {
      predefined_metric_type = "KafkaBrokerStorageUtilization"
    }
  }
}
