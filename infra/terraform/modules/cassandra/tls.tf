# Internode and client TLS. A CA made here (its certificate goes to Parley's pods as
# PARLEY_CASSANDRA_SSL_CA), a cert-manager CA Issuer on it, and one node certificate with JKS key and trust
# stores, which cert-manager renews and Cassandra reloads.

resource "tls_private_key" "ca" {
  algorithm   = "ECDSA"
  ecdsa_curve = "P256"
}

resource "tls_self_signed_cert" "ca" {
  private_key_pem       = tls_private_key.ca.private_key_pem
  is_ca_certificate     = true
  validity_period_hours = 24 * 365 * 10
  allowed_uses          = ["cert_signing", "crl_signing"]

  subject {
    common_name  = "${var.cluster_name} Cassandra CA"
    organization = "Parley"
  }
}

resource "kubernetes_secret_v1" "ca" {
  metadata {
    name      = "${var.cluster_name}-cassandra-ca"
    namespace = var.namespace
  }

  type = "kubernetes.io/tls"

  data = {
    "tls.crt" = tls_self_signed_cert.ca.cert_pem
    "tls.key" = tls_private_key.ca.private_key_pem
  }
}

resource "kubernetes_manifest" "issuer" {
  manifest = {
    apiVersion = "cert-manager.io/v1"
    kind       = "Issuer"
    metadata   = { name = "${var.cluster_name}-cassandra-ca", namespace = var.namespace }
    spec       = { ca = { secretName = kubernetes_secret_v1.ca.metadata[0].name } }
  }
}

resource "random_password" "keystore" {
  length  = 32
  special = false
}

resource "kubernetes_secret_v1" "keystore_password" {
  metadata {
    name      = "${var.cluster_name}-cassandra-keystore-password"
    namespace = var.namespace
  }

  data = { password = random_password.keystore.result }
}

locals {
  # cass-operator's services: <cluster>-<dc>-service (clients' contact point) and
  # <cluster>-<dc>-all-pods-service (one DNS name per pod).
  service          = "${var.cluster_name}-${var.datacenter}-service.${var.namespace}.svc"
  all_pods_service = "${var.cluster_name}-${var.datacenter}-all-pods-service.${var.namespace}.svc"
  tls_secret       = "${var.cluster_name}-cassandra-tls"
}

resource "kubernetes_manifest" "node_certificate" {
  manifest = {
    apiVersion = "cert-manager.io/v1"
    kind       = "Certificate"
    metadata   = { name = local.tls_secret, namespace = var.namespace }
    spec = {
      secretName  = local.tls_secret
      issuerRef   = { name = kubernetes_manifest.issuer.manifest.metadata.name, kind = "Issuer" }
      commonName  = local.service
      dnsNames    = [local.service, "${local.service}.cluster.local", "*.${local.all_pods_service}", "*.${local.all_pods_service}.cluster.local"]
      duration    = "2160h"
      renewBefore = "360h"
      privateKey  = { algorithm = "ECDSA", size = 256, rotationPolicy = "Always" }
      usages      = ["server auth", "client auth"]
      keystores = {
        jks = {
          create            = true
          passwordSecretRef = { name = kubernetes_secret_v1.keystore_password.metadata[0].name, key = "password" }
        }
      }
    }
  }
}
