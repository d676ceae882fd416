output "repository_urls" {
  description = "Push/pull URL of each repository by name (the images: of infra/fleet/example.yaml)"
  value       = { for name, repo in aws_ecr_repository.this : name => repo.repository_url }
}
