output "vpc_id" {
  description = "ID of the VPC"
  value       = aws_vpc.this.id
}

output "vpc_cidr" {
  description = "IPv4 range of the VPC"
  value       = aws_vpc.this.cidr_block
}

output "availability_zones" {
  description = "The AZs the subnets are in, in subnet order"
  value       = local.azs
}

output "private_subnet_ids" {
  description = "Private subnet IDs, one per AZ in availability_zones order: nodes, MSK brokers"
  value       = aws_subnet.private[*].id
}

output "public_subnet_ids" {
  description = "Public subnet IDs, one per AZ: NAT gateways and internet-facing load balancers"
  value       = aws_subnet.public[*].id
}
