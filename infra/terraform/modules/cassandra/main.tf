# Cassandra 5 on the cluster through the K8ssandra operator, not Amazon Keyspaces: Parley's schema needs
# storage-attached indexes (messages_message_id, 0004) and an SAI vector index over vector<float, 384>
# (document_chunks_embedding, 0009), which Keyspaces does not offer.
# One datacenter, one rack per AZ, on the dedicated Cassandra nodes; password authentication, authorization,
# TLS from clients (required) and between nodes.

locals {
  stores = {
    keystoreSecretRef           = { name = local.tls_secret, key = "keystore.jks" }
    keystorePasswordSecretRef   = { name = kubernetes_secret_v1.keystore_password.metadata[0].name, key = "password" }
    truststoreSecretRef         = { name = local.tls_secret, key = "truststore.jks" }
    truststorePasswordSecretRef = { name = kubernetes_secret_v1.keystore_password.metadata[0].name, key = "password" }
  }
}

resource "random_password" "superuser" {
  length  = 40
  special = false
}

resource "random_password" "parley" {
  length  = 40
  special = false
}

resource "kubernetes_secret_v1" "superuser" {
  metadata {
    name      = "${var.cluster_name}-superuser"
    namespace = var.namespace
  }

  data = {
    username = "${var.cluster_name}-superuser"
    password = random_password.superuser.result
  }
}

resource "kubernetes_secret_v1" "parley_role" {
  metadata {
    name      = "${var.cluster_name}-parley-role"
    namespace = var.namespace
  }

  data = {
    username = var.parley_role
    password = random_password.parley.result
  }
}

# The same credentials where operators and other accounts' tooling can read them (under the secrets key).
resource "aws_secretsmanager_secret" "credentials" {
  #checkov:skip=CKV2_AWS_57:Rotating a Cassandra password is ALTER ROLE plus a rollout of every pod that mounts it; the README's procedure, not a Lambda
  name                    = "${var.name_prefix}/cassandra/credentials"
  description             = "Cassandra superuser and Parley role of the ${var.cluster_name} K8ssandraCluster"
  kms_key_id              = var.secrets_kms_key_arn
  recovery_window_in_days = 7
}

resource "aws_secretsmanager_secret_version" "credentials" {
  secret_id = aws_secretsmanager_secret.credentials.id
  secret_string = jsonencode({
    superuser = { username = kubernetes_secret_v1.superuser.data.username, password = random_password.superuser.result }
    parley    = { username = var.parley_role, password = random_password.parley.result }
  })
}

resource "kubernetes_manifest" "k8ssandra_cluster" {
  manifest = {
    apiVersion = "k8ssandra.io/v1alpha1"
    kind       = "K8ssandraCluster"
    metadata   = { name = var.cluster_name, namespace = var.namespace }
    spec = {
      auth = true
      cassandra = {
        serverVersion      = var.server_version
        superuserSecretRef = { name = kubernetes_secret_v1.superuser.metadata[0].name }

        storageConfig = {
          cassandraDataVolumeClaimSpec = {
            storageClassName = var.storage_class
            accessModes      = ["ReadWriteOnce"]
            resources        = { requests = { storage = "${var.storage_gib}Gi" } }
          }
        }

        config = {
          jvmOptions = { heapSize = "${var.heap_gib}Gi" }
          cassandraYaml = {
            authenticator             = "PasswordAuthenticator"
            authorizer                = "CassandraAuthorizer"
            role_manager              = "CassandraRoleManager"
            client_encryption_options = { enabled = true, optional = false }
            server_encryption_options = { internode_encryption = "all" }
          }
        }

        clientEncryptionStores = local.stores
        serverEncryptionStores = local.stores

        resources = {
          requests = { cpu = var.cpu, memory = var.memory }
          limits   = { memory = var.memory }
        }

        tolerations = [{ key = "parley.dev/dedicated", operator = "Equal", value = "cassandra", effect = "NoSchedule" }]

        datacenters = [{
          metadata = { name = var.datacenter }
          size     = var.nodes
          racks = [for az in var.availability_zones : {
            name               = az
            nodeAffinityLabels = { "topology.kubernetes.io/zone" = az, "parley.dev/role" = "cassandra" }
          }]
        }]
      }
    }
  }

  timeouts {
    create = "60m"
    update = "60m"
  }

  depends_on = [kubernetes_manifest.node_certificate]
}
