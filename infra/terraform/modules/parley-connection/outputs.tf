output "settings" {
  description = "The PARLEY_* settings of the parley-infra ConfigMap (no secrets: passwords are files)"
  value       = local.settings
}

output "mount_paths" {
  description = "Where the manifests must mount each Secret or ConfigMap for the settings' file paths to hold"
  value       = local.mounts
}
