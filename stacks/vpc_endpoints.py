"""VPC endpoints so nodes reach AWS services (ECR, STS, EKS, SSM, logs...) without the NAT gateway."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from constructs import Construct


class ServiceEndpoints(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        vpc: ec2.Vpc,
        vpc_cidr: str,
        interface_services: tuple[str, ...],
        gateway_services: tuple[str, ...],
    ) -> None:
        super().__init__(scope, id_)
        private = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=False, description="HTTPS from the VPC to AWS service endpoints"
        )
        self.security_group.add_ingress_rule(ec2.Peer.ipv4(vpc_cidr), ec2.Port.tcp(443), "HTTPS from inside the VPC")
        for name in gateway_services:
            vpc.add_gateway_endpoint(_logical(name), service=ec2.GatewayVpcEndpointAwsService(name), subnets=[private])
        self.interface_endpoints = {
            name: vpc.add_interface_endpoint(
                _logical(name),
                service=ec2.InterfaceVpcEndpointAwsService(name),
                subnets=private,
                private_dns_enabled=True,
                security_groups=[self.security_group],
                open=False,
            )
            for name in interface_services
        }


def _logical(service: str) -> str:
    return "".join(part.capitalize() for part in service.replace(".", "-").split("-")) + "Endpoint"
