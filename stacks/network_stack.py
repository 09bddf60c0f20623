"""Network: a VPC with private subnets in every AZ, one NAT path for public registries, endpoints, flow logs.

Subnets exist in every AZ of the region (stacks/kit_stack.py says why): only the GPU node groups
follow the block; this stack does not change when the block's AZ does.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from pdkit.model.plan import Plan
from stacks.encrypted_log_group import EncryptedLogGroup, logs_key
from stacks.kit_stack import KitStack
from stacks.policy import acknowledge, named_az
from stacks.trust import flow_logs_principal
from stacks.vpc_endpoints import ServiceEndpoints


class NetworkStack(KitStack):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, **kwargs: Any) -> None:
        super().__init__(scope, id_, zones=plan.availability_zones, **kwargs)
        net = plan.network

        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(str(net.vpc_cidr)),
            availability_zones=self.availability_zones,
            nat_gateways=net.nat_gateways,
            restrict_default_security_group=True,
            subnet_configuration=[
                # Public subnets hold only the NAT gateways; nothing gets a public IP at launch.
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=plan.public_subnet_mask, map_public_ip_on_launch=False
                ),
                ec2.SubnetConfiguration(name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=plan.private_subnet_mask),
            ],
        )
        for subnet in self.vpc.private_subnets:
            # The AWS Load Balancer Controller places the router's internal NLB by this tag.
            cdk.Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")

        self.endpoints = ServiceEndpoints(
            self,
            "Endpoints",
            vpc=self.vpc,
            vpc_cidr=str(net.vpc_cidr),
            interface_services=plan.interface_endpoints,
            gateway_services=plan.gateway_endpoints,
        )

        key = logs_key(self, "LogsKey", description=f"{plan.name}: VPC flow logs")
        flow_logs = EncryptedLogGroup(self, "FlowLogs", key=key, retention_days=net.flow_log_retention_days)
        # A customer-managed policy instead of CDK's inline grant (NIST IAMNoInlinePolicy); the role
        # is handed to the flow log without policy updates so CDK adds nothing inline.
        writer = iam.ManagedPolicy(
            self,
            "FlowLogsWriter",
            statements=[
                iam.PolicyStatement(
                    actions=["logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
                    resources=[flow_logs.log_group.log_group_arn],
                )
            ],
        )
        role = iam.Role(self, "FlowLogsRole", assumed_by=flow_logs_principal(self), managed_policies=[writer])
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_logs.log_group, role.without_policy_updates()),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )

        self.private_subnets_by_az = {s.availability_zone: s for s in self.vpc.private_subnets}
        cdk.CfnOutput(self, "VpcId", value=self.vpc.vpc_id)
        for az, subnet in self.private_subnets_by_az.items():
            cdk.CfnOutput(self, f"PrivateSubnet{az[-1].upper()}", value=subnet.subnet_id, description=f"private subnet in {az}")
        self._acknowledge_subnets()

    def _acknowledge_subnets(self) -> None:
        for subnet in [*self.vpc.public_subnets, *self.vpc.private_subnets]:
            named_az(subnet)
        for subnet in self.vpc.public_subnets:
            acknowledge(
                subnet,
                {
                    "NIST.800.53.R5-VPCNoUnrestrictedRouteToIGW": "Public subnets exist only to host the NAT gateways; their default route to the internet gateway is what a NAT needs, and no instance launches there with a public IP.",
                },
            )
