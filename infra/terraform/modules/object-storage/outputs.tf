output "archive_bucket" {
  description = "Name of the event archive bucket (PARLEY_ARCHIVE_URL=s3://<name>/)"
  value       = module.archive.name
}

output "archive_bucket_arn" {
  description = "ARN of the event archive bucket"
  value       = module.archive.arn
}

output "documents_bucket" {
  description = "Name of the documents bucket (PARLEY_DOCUMENTS_BLOB_URL=s3://<name>/originals)"
  value       = module.documents.name
}

output "documents_bucket_arn" {
  description = "ARN of the documents bucket"
  value       = module.documents.arn
}

output "access_logs_bucket" {
  description = "Name of the bucket that receives the data buckets' server access logs"
  value       = aws_s3_bucket.logs.id
}
