"""Images: ECR repositories (immutable tags, scan on push, lifecycle, KMS) and an in-region CodeBuild
of containers/ (plus the pdkit weights-staging modules the serving image carries) for linux/amd64, started
on deploy when that source changes.

A 20+ GB CUDA image should not travel from a laptop; CodeBuild pulls bases and pushes to ECR inside
the region. Repository names and tags come from the plan (containers/versions.yaml).

A rehearsal builds nothing: it runs the images built for its block, from the block's registry (the plan's
image_region), so its images stack is an empty shell that only names them.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from pdkit.model.images import ROOT, context_files_outside_containers
from pdkit.model.plan import Plan
from stacks.build_compute import compute_type
from stacks.encrypted_log_group import EncryptedLogGroup, logs_key
from stacks.kit_function import KitFunction
from stacks.kit_stack import KitStack
from stacks.policy import acknowledge

KEEP_IMAGES = 10
# containers/build_args.py (through containers/versions.py) needs what versions.py imports on the build host,
# at the kit's own pins (requirements.txt; tests/test_images.py keeps them equal).
BUILD_HOST_PINS = ("pyyaml==6.0.4", "pydantic==2.14.4", "docker==7.2.0", "dockerfile-parse==2.0.1")
BASE_DIGESTS = "base-digests.txt"  # component=sha256:... of every base image a build resolved


class ImagesStack(KitStack):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, vpc: ec2.IVpc, **kwargs: Any) -> None:
        super().__init__(scope, id_, zones=plan.availability_zones, **kwargs)
        self.repositories: dict[str, ecr.Repository] = {}
        if plan.rehearses is not None:
            registry = plan.image_registry(self.account)
            for image in plan.images.values():
                cdk.CfnOutput(self, f"{image.name.title().replace('-', '')}Image", value=image.uri(registry))
            cdk.CfnOutput(self, "Images", value=f"the images of {plan.rehearses}, built in {plan.image_region}; nothing to build here")
            # A template needs at least one resource; this one creates nothing and costs nothing
            # (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-waitconditionhandle.html).
            cdk.CfnResource(self, "NothingToBuild", type="AWS::CloudFormation::WaitConditionHandle")
            return
        key = kms.Key(self, "ImagesKey", description=f"{plan.name}: ECR images and build artifacts", enable_key_rotation=True)
        for image in plan.images.values():
            if not image.build:
                continue
            self.repositories[image.name] = ecr.Repository(
                self,
                f"{image.name.title().replace('-', '')}Repository",
                repository_name=image.repository,
                image_tag_mutability=ecr.TagMutability.IMMUTABLE,
                image_scan_on_push=True,
                encryption=ecr.RepositoryEncryption.KMS,
                encryption_key=key,
                # RetainExceptOnCreate, as a named resource (stacks/retention.py): a failed first create leaves no repository behind.
                removal_policy=cdk.RemovalPolicy.RETAIN,
                lifecycle_rules=[
                    ecr.LifecycleRule(
                        description="drop untagged layers after a week",
                        tag_status=ecr.TagStatus.UNTAGGED,
                        max_image_age=cdk.Duration.days(7),
                    ),
                    ecr.LifecycleRule(
                        description=f"keep the newest {KEEP_IMAGES} tags", tag_status=ecr.TagStatus.ANY, max_image_count=KEEP_IMAGES
                    ),
                ],
            )
            # CloudFormation deletes a repository only when it is empty: a failed first create whose build already pushed
            # would end ROLLBACK_FAILED with the repository in the way of the retry. EmptyOnDelete acts only when
            # CloudFormation deletes (RetainExceptOnCreate: only that rollback), never on `make destroy`.
            # (CDK's emptyOnDelete insists on RemovalPolicy.DESTROY, hence the L1 property.)
            # https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-ecr-repository.html
            repository = self.repositories[image.name].node.default_child
            assert isinstance(repository, ecr.CfnRepository)
            repository.empty_on_delete = True
        if not self.repositories:
            cdk.CfnOutput(self, "Images", value="external registry; nothing to build")
            return

        source = s3_assets.Asset(
            self,
            "Source",
            path=str(ROOT),
            # containers/ plus the pdkit modules the serving image copies for the weights-staging init
            # container (containers/sglang-efa/Dockerfile.dockerignore); the build context is this root.
            # ".*": "*" skips dot entries, which would let .venv/.git/... files into the hash and the zip.
            # The pdkit files come from the images' Dockerfile.dockerignore allow-lists, so a new COPY needs no edit here.
            exclude=["*", ".*", "!containers", "!containers/**", *_admit(context_files_outside_containers()), "**/__pycache__"],
        )
        logs_kms = logs_key(self, "BuildLogsKey", description=f"{plan.name}: image build logs")
        build_logs = EncryptedLogGroup(self, "BuildLogs", key=logs_kms, retention_days=plan.log_retention_days)
        registry = f"{self.account}.dkr.ecr.{self.region}.amazonaws.com"
        self.project = codebuild.Project(
            self,
            "Build",
            description=f"{plan.name}: build and push {', '.join(self.repositories)} (linux/amd64)",
            source=codebuild.Source.s3(bucket=source.bucket, path=source.s3_object_key),
            environment=codebuild.BuildEnvironment(
                build_image=codebuild.LinuxBuildImage.STANDARD_7_0,
                compute_type=compute_type(plan.region),
                # Docker-in-Docker needs a privileged build container; nothing else runs in this project.
                privileged=True,
            ),
            encryption_key=key,
            timeout=cdk.Duration.hours(4),
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=build_logs.log_group)),
            environment_variables={"REGISTRY": codebuild.BuildEnvironmentVariable(value=registry)},
            build_spec=codebuild.BuildSpec.from_object(_build_spec(plan, registry)),
        )
        for repository in self.repositories.values():
            repository.grant_pull_push(self.project)
            # The buildspec asks whether the planned tag exists before building (describe-images): pushing
            # an existing tag to an IMMUTABLE repository fails, so a rebuild must be skipped, not attempted.
            repository.grant(self.project, "ecr:DescribeImages")
        source.grant_read(self.project)

        starter = KitFunction(
            self,
            "StartBuild",
            handler="pdkit.functions.start_build.handler",
            modules=("functions/cfn_response.py", "functions/start_build.py"),
            description=f"{plan.name}: start the image build when the image source changes",
            vpc=vpc,
            key=logs_kms,
            log_retention_days=plan.log_retention_days,
        )
        starter.allow("StartBuildPermission", iam.PolicyStatement(actions=["codebuild:StartBuild"], resources=[self.project.project_arn]))
        cdk.CustomResource(
            self,
            "BuildOnDeploy",
            service_token=starter.function.function_arn,
            resource_type="Custom::ImageBuild",
            # A new source hash (containers/ or the staged pdkit modules) starts a new build.
            properties={"ProjectName": self.project.project_name, "SourceHash": source.asset_hash},
        )
        cdk.CfnOutput(self, "BuildProject", value=self.project.project_name)
        for image in plan.images.values():
            cdk.CfnOutput(self, f"{image.name.title().replace('-', '')}Image", value=image.uri(registry))
        self._acknowledge(plan)

    def _acknowledge(self, plan: Plan) -> None:
        acknowledge(
            self.project,
            {
                "AwsSolutions-CB3": "The project builds container images with Docker (buildx), which needs a privileged build container; its only input is the image source asset (containers/ and the pdkit staging modules).",
            },
        )
        role = self.project.role
        assert role is not None
        where = f"{plan.region}:{plan.account or '<AWS::AccountId>'}"
        build = self.project.node.default_child
        assert isinstance(build, cdk.CfnResource)
        build_id = self.resolve(build.logical_id)
        grants = "CDK-generated grants of the CodeBuild role, each scoped to this project's own source asset, KMS key, report groups or log group"
        acknowledge(
            role,
            {
                "NIST.800.53.R5-IAMNoInlinePolicy": grants + "; they live and die with the project role.",
                "AwsSolutions-IAM5[Resource::*]": "ecr:GetAuthorizationToken supports no resource-level permissions; every push and pull grant is scoped to the kit's repositories.",
                "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]": grants + " (the images key only).",
                "AwsSolutions-IAM5[Action::kms:ReEncrypt*]": grants + " (the images key only).",
                "AwsSolutions-IAM5[Action::s3:GetBucket*]": grants + " (the CDK assets bucket, read only).",
                "AwsSolutions-IAM5[Action::s3:GetObject*]": grants + " (the CDK assets bucket, read only).",
                "AwsSolutions-IAM5[Action::s3:List*]": grants + " (the CDK assets bucket, read only).",
                f"AwsSolutions-IAM5[Resource::arn:aws:codebuild:{where}:report-group/<{build_id}>-*]": grants
                + "; report groups are named after the project at run time.",
                f"AwsSolutions-IAM5[Resource::arn:aws:logs:{where}:log-group:/aws/codebuild/<{build_id}>:*]": grants
                + "; CodeBuild's default log group name, unused because the project logs to its own encrypted group.",
                f"AwsSolutions-IAM5[Resource::arn:aws:s3:::cdk-hnb659fds-assets-{plan.account or '<AWS::AccountId>'}-{plan.region}/*]": grants
                + "; asset object keys are content hashes known only at publish time.",
            },
        )


def _admit(files: list[str]) -> list[str]:
    """`!dir` for every parent (an excluded directory is not walked) then `!file`, in the asset's glob syntax."""
    parents = sorted({"/".join(name.split("/")[:i]) for name in files for i in range(1, name.count("/") + 1)})
    return [f"!{name}" for name in [*parents, *files]]


def _build_spec(plan: Plan, registry: str) -> dict[str, Any]:
    """Skip a tag that exists, else build, import-test and push it with containers/build.sh (as a local build does).

    describe-images answers ImageNotFoundException for a missing tag; any other error (a missing grant,
    a missing repository, throttling) fails the build instead of being taken for "missing" and rebuilt:
    https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DescribeImages.html
    Each built image's base-image digests go to base-digests.txt and into the exported variable
    BASE_IMAGE_DIGESTS (`aws codebuild batch-get-builds` shows it), ready for containers/pin_digests.py --set.
    No `docker buildx create`: its docker-container driver pulls moby/buildkit from Docker Hub (anonymous
    pull limits); Docker's own builder loads the image, so build.sh can `docker run` it before the push.
    """
    steps = []
    for image in plan.images.values():
        if not image.build:
            continue
        ref = f"$REGISTRY/{image.repository}:{image.tag}"
        steps.append(
            f"if found=$(aws ecr describe-images --repository-name {image.repository} --image-ids imageTag={image.tag} 2>&1); "
            f'then echo "{ref} exists, skipping"; '
            f'elif echo "$found" | grep -q ImageNotFoundException; '
            f"then bash containers/build.sh {image.name} {ref} --push --record {BASE_DIGESTS}; "
            f'else echo "aws ecr describe-images {image.repository}:{image.tag} failed: $found" >&2; false; fi'
        )
    return {
        "version": "0.2",
        "env": {"exported-variables": ["BASE_IMAGE_DIGESTS"]},
        "phases": {
            "install": {"commands": [f"pip3 install --quiet {' '.join(BUILD_HOST_PINS)}"]},
            "pre_build": {"commands": ["aws ecr get-login-password | docker login --username AWS --password-stdin $REGISTRY"]},
            "build": {"commands": steps},
            "post_build": {"commands": [f'export BASE_IMAGE_DIGESTS="$(sort -u {BASE_DIGESTS} 2>/dev/null | paste -sd " " -)"']},
        },
    }
