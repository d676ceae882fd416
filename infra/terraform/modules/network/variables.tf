variable "name_prefix" {
  description = "Prefix of every name, e.g. parley-production"
  type        = string
}

variable "cidr" {
  description = "The VPC's IPv4 range; a /16 gives each AZ a /18 of private addresses (pods take VPC addresses under the VPC CNI)"
  type        = string
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.cidr, 0)) && tonumber(split("/", var.cidr)[1]) <= 16
    error_message = "cidr must be an IPv4 range of /16 or larger."
  }
}

variable "availability_zones" {
  description = "The three AZs to spread subnets over, named (not discovered) so a new AZ in the region never moves a subnet; Kafka brokers and Cassandra racks use one each"
  type        = list(string)

  validation {
    condition     = length(var.availability_zones) == 3 && length(distinct(var.availability_zones)) == 3
    error_message = "availability_zones must name 3 distinct AZs (the subnet plan is three private /18 and three public /22)."
  }
}

variable "nat_gateway_per_az" {
  description = "One NAT gateway per AZ (true: an AZ outage leaves the others' egress) or one shared (false: cheaper)"
  type        = bool
  default     = true
}

variable "cluster_name" {
  description = "EKS cluster name, tagged on the subnets so load balancers find them"
  type        = string
}

variable "logs_kms_key_arn" {
  description = "KMS key ARN that encrypts the flow log group"
  type        = string
}

variable "log_retention_days" {
  description = "Days CloudWatch keeps the VPC flow logs"
  type        = number
  default     = 365
}
