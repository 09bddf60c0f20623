"""GPU node image: an EC2 Image Builder pipeline from ami/components/, parented on the EKS AL2023 NVIDIA
AMI of the cluster's Kubernetes version, that publishes each encrypted AMI as a promotion candidate.

Builds start by hand (`aws imagebuilder start-image-pipeline-execution`, runbooks/05-node-image.md); a
build never moves nodes: only promotion to pdkit.render.ami.image_parameter() does, at the next deploy of the
capacity stack with `ami.source: custom`. The stack exists for every profile (the switch is the
launch template's image source, not this stack).
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_imagebuilder as imagebuilder
from aws_cdk import aws_kms as kms
from constructs import Construct

from pdkit.model.plan import Plan
from pdkit.render import ami
from stacks.ami_builder import ImageBuilderHost
from stacks.encrypted_log_group import EncryptedLogGroup, logs_key
from stacks.kit_stack import KitStack

IB = imagebuilder.CfnImageRecipe
# Image Builder's own limit; 90 minutes covers booting the new AMI and re-reading a 20+ GB image.
TEST_TIMEOUT_MINUTES = 90


class AmiStack(KitStack):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, vpc: ec2.IVpc, **kwargs: Any) -> None:
        super().__init__(scope, id_, zones=plan.availability_zones, **kwargs)
        prefix = f"{plan.name}-gpu-node"
        self.key = self._image_key(plan)
        logs_kms = logs_key(self, "LogsKey", description=f"{plan.name}: GPU node image build logs")
        retention = plan.log_retention_days
        # Named under /aws/imagebuilder/ so Image Builder writes to them without an execution role; created
        # here first so they carry the kit's key and retention instead of Image Builder's defaults.
        self.build_logs = EncryptedLogGroup(
            self, "BuildLogs", key=logs_kms, retention_days=retention, log_group_name=f"/aws/imagebuilder/{prefix}"
        )
        self.pipeline_logs = EncryptedLogGroup(
            self, "PipelineLogs", key=logs_kms, retention_days=retention, log_group_name=f"/aws/imagebuilder/pipeline/{prefix}"
        )

        registry = plan.image_registry(self.account)
        parameters = ami.component_parameters(plan, registry=registry)
        self.components = {
            name: imagebuilder.CfnComponent(
                self,
                f"{name.title().replace('-', '')}Component",
                # Components are immutable: a changed document gets a new name (see pdkit.render.ami.recipe_fingerprint).
                name=f"{plan.name}-{name}-{ami.component_fingerprint(name)}",
                version="1.0.0",
                platform="Linux",
                supported_os_versions=["Amazon Linux 2023"],
                description=ami.component_document(name)["description"],
                data=ami.component_text(name),
                kms_key_id=self.key.key_arn,
            )
            for name in ami.COMPONENTS
        }
        self.recipe = imagebuilder.CfnImageRecipe(
            self,
            "Recipe",
            name=f"{prefix}-{ami.recipe_fingerprint(plan)}",
            version="1.0.0",
            description=f"{plan.name}: EKS {plan.kubernetes_version} AL2023 NVIDIA node, pinned driver and EFA, serving image pre-pulled",
            parent_image=ami.parent_image(plan.kubernetes_version),
            components=[
                IB.ComponentConfigurationProperty(
                    component_arn=self.components[name].attr_arn,
                    parameters=[IB.ComponentParameterProperty(name=key, value=[value]) for key, value in parameters[name].items()],
                )
                for name in ami.COMPONENTS
            ],
            block_device_mappings=[
                IB.InstanceBlockDeviceMappingProperty(
                    device_name=ami.ROOT_DEVICE,
                    ebs=IB.EbsInstanceBlockDeviceSpecificationProperty(
                        volume_size=ami.ROOT_VOLUME_GIB,
                        volume_type="gp3",
                        encrypted=True,
                        kms_key_id=self.key.key_arn,
                        delete_on_termination=True,
                    ),
                )
            ],
        )

        builder = ImageBuilderHost(self, "Builder", plan=plan, vpc=vpc, subnet=vpc.private_subnets[0], key=self.key)
        self.infrastructure = builder.infrastructure
        serving = plan.images[ami.SERVING_IMAGE]
        self.distribution = imagebuilder.CfnDistributionConfiguration(
            self,
            "Distribution",
            name=prefix,
            description=f"{plan.name}: encrypted GPU node AMI, published as a promotion candidate",
            distributions=[
                imagebuilder.CfnDistributionConfiguration.DistributionProperty(
                    region=plan.region,
                    # A JSON-typed property in CloudFormation's spelling: aws-cdk-lib passes it through as is.
                    ami_distribution_configuration={
                        "Name": f"{prefix}-{{{{ imagebuilder:buildDate }}}}",
                        "Description": f"{plan.name}: EKS {plan.kubernetes_version} GPU node, {serving.name}:{serving.tag} pre-pulled",
                        "KmsKeyId": self.key.key_arn,
                        "AmiTags": {
                            "pdkit:deployment": plan.name,
                            "pdkit:kubernetes-version": plan.kubernetes_version,
                            "pdkit:nvidia-driver-min-branch": str(ami.NVIDIA_DRIVER_MIN_BRANCH),
                            "pdkit:serving-image": f"{serving.repository}:{serving.tag}",
                        },
                    },
                    ssm_parameter_configurations=[
                        imagebuilder.CfnDistributionConfiguration.SsmParameterConfigurationProperty(
                            parameter_name=ami.candidate_parameter(plan.name), data_type="aws:ec2:image"
                        )
                    ],
                )
            ],
        )
        self.pipeline = imagebuilder.CfnImagePipeline(
            self,
            "Pipeline",
            name=prefix,
            description=f"{plan.name}: GPU node image; started by hand (runbooks/05-node-image.md), no schedule",
            image_recipe_arn=self.recipe.attr_arn,
            infrastructure_configuration_arn=self.infrastructure.attr_arn,
            distribution_configuration_arn=self.distribution.attr_arn,
            status="ENABLED",
            image_tests_configuration=imagebuilder.CfnImagePipeline.ImageTestsConfigurationProperty(
                image_tests_enabled=True, timeout_minutes=TEST_TIMEOUT_MINUTES
            ),
            enhanced_image_metadata_enabled=True,
            logging_configuration=imagebuilder.CfnImagePipeline.PipelineLoggingConfigurationProperty(
                image_log_group_name=self.build_logs.log_group.log_group_name,
                pipeline_log_group_name=self.pipeline_logs.log_group.log_group_name,
            ),
        )

        cdk.CfnOutput(self, "PipelineArn", value=self.pipeline.attr_arn, description="aws imagebuilder start-image-pipeline-execution")
        cdk.CfnOutput(self, "CandidateParameter", value=ami.candidate_parameter(plan.name), description="AMI id of the newest build")
        cdk.CfnOutput(self, "ImageParameter", value=ami.image_parameter(plan.name), description="promoted AMI id (ami.source: custom)")

    def _image_key(self, plan: Plan) -> kms.Key:
        key = kms.Key(
            self,
            "ImageKey",
            description=f"{plan.name}: GPU node AMI snapshots and Image Builder components",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        # Volumes restored from the AMI's snapshots are created by service-linked roles (Image Builder's test
        # instance, Auto Scaling for the EKS node groups) through EC2; the same statement as AWS's own aws/ebs
        # key. Naming those roles instead would fail while a role does not exist yet in a fresh account.
        key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EbsThroughEc2ForThisAccount",
                principals=[iam.AnyPrincipal()],
                actions=["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:CreateGrant", "kms:DescribeKey"],
                resources=["*"],
                conditions={"StringEquals": {"kms:CallerAccount": self.account, "kms:ViaService": f"ec2.{self.region}.amazonaws.com"}},
            )
        )
        return key
