"""Where Image Builder builds and tests the GPU node image: a GPU-less instance in a private subnet with
IMDSv2, reachable only through SSM, allowed to pull the serving image and nothing else of the kit's."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_imagebuilder as imagebuilder
from aws_cdk import aws_kms as kms
from constructs import Construct

from pdkit.model.plan import Plan
from pdkit.render import ami
from stacks.policy import acknowledge

# Image Builder drives the instance through the SSM agent and streams build logs under /aws/imagebuilder/.
MANAGED_POLICIES = ("AmazonSSMManagedInstanceCore", "EC2InstanceProfileForImageBuilder")


class ImageBuilderHost(Construct):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, subnet: ec2.ISubnet, vpc: ec2.IVpc, key: kms.IKey) -> None:
        super().__init__(scope, id_)
        stack = cdk.Stack.of(self)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"{plan.name}: GPU node image builder",
            managed_policies=[iam.ManagedPolicy.from_aws_managed_policy_name(name) for name in MANAGED_POLICIES],
        )
        statements = [
            # Components are encrypted with the image key; the instance decrypts them when it fetches them.
            iam.PolicyStatement(actions=["kms:Decrypt"], resources=[key.key_arn]),
        ]
        serving = plan.images[ami.SERVING_IMAGE]
        if serving.build:
            repository = stack.format_arn(service="ecr", resource="repository", region=plan.image_region, resource_name=serving.repository)
            statements += [
                iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]),
                iam.PolicyStatement(
                    actions=["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability"],
                    resources=[repository],
                ),
            ]
        self.policy = iam.ManagedPolicy(self, "Pull", statements=statements)
        self.role.add_managed_policy(self.policy)
        self.instance_profile = iam.InstanceProfile(self, "InstanceProfile", role=self.role)

        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=False, description="Image builder: no inbound, HTTPS out"
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "SSM, Image Builder, ECR and S3 via endpoints or NAT")

        self.infrastructure = imagebuilder.CfnInfrastructureConfiguration(
            self,
            "Infrastructure",
            name=f"{plan.name}-gpu-node-builder",
            description=f"{plan.name}: builds and tests the GPU node image without a GPU (pdkit/render/ami.py)",
            instance_profile_name=self.instance_profile.instance_profile_name,
            instance_types=list(ami.BUILDER_INSTANCE_TYPES),
            subnet_id=subnet.subnet_id,
            security_group_ids=[self.security_group.security_group_id],
            # IMDSv2 only; hop limit 1 because nothing on the builder runs in a container that needs IMDS.
            instance_metadata_options=imagebuilder.CfnInfrastructureConfiguration.InstanceMetadataOptionsProperty(
                http_tokens="required", http_put_response_hop_limit=1
            ),
            terminate_instance_on_failure=True,
            resource_tags={"pdkit:deployment": plan.name, "pdkit:purpose": "gpu-node-image-build"},
        )
        self._acknowledge(serving.build)

    def _acknowledge(self, pulls_from_ecr: bool) -> None:
        acknowledge(
            self.role,
            {
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonSSMManagedInstanceCore]": "Image Builder runs every component through the SSM agent; this AWS-maintained policy is the documented minimum for a managed instance.",
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/EC2InstanceProfileForImageBuilder]": "The instance profile policy Image Builder documents for build instances (fetch components, the AWSTOE binary, write /aws/imagebuilder logs).",
            },
        )
        if pulls_from_ecr:
            acknowledge(
                self.policy,
                {
                    "AwsSolutions-IAM5[Resource::*]": "ecr:GetAuthorizationToken supports no resource-level permissions; the pull itself is scoped to the serving image repository.",
                },
            )
