"""An SSM-managed host inside the VPC: the way to a private EKS endpoint with no inbound port.

Operators port-forward through it with Session Manager (AWS-StartPortForwardingSessionToRemoteHost)
to the Kubernetes API and to the router's internal load balancer; see runbooks/01-cluster.md.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from pdkit.render.serving.ports import ROUTER_PORT
from stacks.policy import acknowledge, named_az

# AWS Control Tower's CT.EC2.PR.19 admits only Nitro types that encrypt traffic between instances (t4g, the
# obvious choice for a port-forward host, is not one); m7i is the default system nodes' family, so the region
# already offers it. https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/data-protection.html#encryption-transit
INSTANCE_TYPE = "m7i.large"


class AccessHost(Construct):
    def __init__(self, scope: Construct, id_: str, *, vpc: ec2.IVpc) -> None:
        super().__init__(scope, id_)
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=False, description="SSM access host: no inbound, HTTPS out"
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "SSM, the EKS API and the router load balancer (HTTPS)")
        # The router's Service port is its container port (pdkit/render/serving/manifests.py router_service).
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(ROUTER_PORT), "the router internal load balancer (HTTP)")
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"))
        role.add_managed_policy(iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"))
        self.instance = ec2.Instance(
            self,
            "Instance",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            instance_type=ec2.InstanceType(INSTANCE_TYPE),
            machine_image=ec2.MachineImage.latest_amazon_linux2023(cpu_type=ec2.AmazonLinuxCpuType.X86_64),
            # Written out (an interface with AssociatePublicIpAddress false, not a bare SubnetId) for CT.EC2.PR.8.
            associate_public_ip_address=False,
            security_group=self.security_group,
            role=role,
            http_tokens=ec2.HttpTokens.REQUIRED,
            http_put_response_hop_limit=1,
            detailed_monitoring=True,
            block_devices=[ec2.BlockDevice(device_name="/dev/xvda", volume=ec2.BlockDeviceVolume.ebs(8, encrypted=True))],
        )
        named_az(self.instance)
        acknowledge(
            role,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]": "AWS-maintained minimum for a Session Manager managed instance; the host has no other permissions.",
            },
        )
        acknowledge(
            self.instance,
            {
                "AwsSolutions-EC29": "A stateless port-forward host, replaced freely; termination protection would only block `cdk destroy`.",
                # cdk-nag 3.0.2 EC2EBSVolumeEncrypted reads `launchTemplate.launchTemplateName` of every instance as soon
                # as the stack holds any launch template (here: the system nodes'), and fails instances without one.
                "AwsSolutions-EC26": "False positive of cdk-nag 3.0.2 (rule crashes on instances without a launch template when the stack has another one); the only volume, /dev/xvda, is Encrypted: true, asserted in tests/test_cluster.py.",
                "NIST.800.53.R5-EC2InstanceTerminationProtection": "A stateless port-forward host, replaced freely; termination protection would only block `cdk destroy`.",
                "NIST.800.53.R5-EC2InstancesInVPC": "The host is in the VPC: its one network interface names a private subnet (NetworkInterfaces[0].SubnetId). cdk-nag reads only the top-level SubnetId, which Control Tower's CT.EC2.PR.8 forbids.",
            },
        )
        cdk.CfnOutput(
            scope, "AccessHostId", value=self.instance.instance_id, description="SSM target for port-forwarding (runbooks/01-cluster.md)"
        )
