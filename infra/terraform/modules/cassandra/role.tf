# Parley's role and keyspace, made once the datacenter answers: the superuser makes a login role that owns
# nothing but the keyspace (transport-security.md, Production), and the keyspace with NetworkTopologyStrategy
# RF 3 in this datacenter, so `parley db migrate` finds it and only adds tables. Re-running it is harmless.

locals {
  replication = "{'class': 'NetworkTopologyStrategy', '${var.datacenter}': 3}"

  role_script = <<-EOT
    set -eu
    umask 077
    cat > "$HOME/cqlshrc" <<RC
    [authentication]
    username = $SUPERUSER
    password = $SUPERUSER_PASSWORD
    [connection]
    ssl = true
    [ssl]
    certfile = /tls/ca.crt
    validate = true
    RC
    cql() { cqlsh --cqlshrc="$HOME/cqlshrc" "$CASSANDRA_HOST" 9042 -e "$1"; }
    until cql "SELECT release_version FROM system.local" >/dev/null 2>&1; do
      echo "waiting for $CASSANDRA_HOST"; sleep 15
    done
    cql "CREATE ROLE IF NOT EXISTS $PARLEY_ROLE WITH LOGIN = true AND PASSWORD = '$PARLEY_PASSWORD'"
    cql "ALTER ROLE $PARLEY_ROLE WITH PASSWORD = '$PARLEY_PASSWORD'"
    cql "CREATE KEYSPACE IF NOT EXISTS $KEYSPACE WITH replication = ${local.replication}"
    cql "GRANT ALL PERMISSIONS ON KEYSPACE $KEYSPACE TO $PARLEY_ROLE"
    echo "role $PARLEY_ROLE and keyspace $KEYSPACE ready"
  EOT
}

resource "kubernetes_job_v1" "parley_role" {
  metadata {
    name      = "${var.cluster_name}-parley-role"
    namespace = var.namespace
  }

  spec {
    backoff_limit              = 6
    active_deadline_seconds    = 3600
    ttl_seconds_after_finished = 86400

    template {
      metadata {
        labels = { "app.kubernetes.io/name" = "parley-cassandra-role" }
      }

      spec {
        restart_policy                  = "OnFailure"
        automount_service_account_token = false

        security_context {
          run_as_non_root = true
          run_as_user     = 999
          run_as_group    = 999

          seccomp_profile {
            type = "RuntimeDefault"
          }
        }

        container {
          name              = "cqlsh"
          image             = var.cqlsh_image
          image_pull_policy = "Always"
          command           = ["/bin/bash", "-c", local.role_script]

          env {
            name  = "HOME"
            value = "/home/cqlsh"
          }

          env {
            name  = "CASSANDRA_HOST"
            value = local.service
          }

          env {
            name  = "PARLEY_ROLE"
            value = var.parley_role
          }

          env {
            name  = "KEYSPACE"
            value = var.keyspace
          }

          env {
            name = "SUPERUSER"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.superuser.metadata[0].name
                key  = "username"
              }
            }
          }

          env {
            name = "SUPERUSER_PASSWORD"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.superuser.metadata[0].name
                key  = "password"
              }
            }
          }

          env {
            name = "PARLEY_PASSWORD"
            value_from {
              secret_key_ref {
                name = kubernetes_secret_v1.parley_role.metadata[0].name
                key  = "password"
              }
            }
          }

          resources {
            requests = { cpu = "100m", memory = "256Mi" }
            limits   = { cpu = "1", memory = "512Mi" }
          }

          security_context {
            allow_privilege_escalation = false
            read_only_root_filesystem  = true
            run_as_non_root            = true

            capabilities {
              drop = ["ALL"]
            }
          }

          volume_mount {
            name       = "home"
            mount_path = "/home/cqlsh"
          }

          volume_mount {
            name       = "ca"
            mount_path = "/tls"
            read_only  = true
          }
        }

        volume {
          name = "home"
          empty_dir {
            medium = "Memory"
          }
        }

        volume {
          name = "ca"
          secret {
            secret_name = local.tls_secret
            items {
              key  = "ca.crt"
              path = "ca.crt"
            }
          }
        }
      }
    }
  }

  wait_for_completion = true

  timeouts {
    create = "60m"
    update = "60m"
  }

  depends_on = [kubernetes_manifest.k8ssandra_cluster]
}
