"""Serving: the weights bucket, the read-only Pod Identity role of the serving pods, and the Kubernetes
objects pdkit renders from the plan (pdkit/render/serving/manifests.py), applied through the cluster.

The same objects are written as plain YAML by `pdkit render` / `make manifests` for GitOps users.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks as eks_l1
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from pdkit.model.plan import Plan
from pdkit.pods.weights_manifest import MANIFEST_NAME
from pdkit.render.serving import inputs, manifests, names
from pdkit.render.serving.compile_cache_objects import cache_prefix
from stacks.kit_stack import KitStack
from stacks.policy import acknowledge
from stacks.trust import pod_identity_principal

NOT_REPLICATED = "Weights are a copy of a public Hugging Face checkpoint, re-importable at any time with `pdkit weights import`; replicating ~760 GB to a second region buys nothing."


class ServingStack(KitStack):
    def __init__(self, scope: Construct, id_: str, *, plan: Plan, cluster: eks.ICluster, **kwargs: Any) -> None:
        super().__init__(scope, id_, zones=plan.availability_zones, **kwargs)
        key = kms.Key(self, "WeightsKey", description=f"{plan.name}: model weights", enable_key_rotation=True)
        access_logs = s3.Bucket(
            self,
            "AccessLogs",
            # S3 server access log delivery supports only SSE-S3 on the target bucket.
            encryption=s3.BucketEncryption.S3_MANAGED,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            removal_policy=cdk.RemovalPolicy.RETAIN,
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(365))],
        )
        self.weights = s3.Bucket(
            self,
            "Weights",
            bucket_name=plan.weights.bucket(self.account),
            encryption=s3.BucketEncryption.KMS,
            encryption_key=key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            versioned=True,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="weights/",
            # RetainExceptOnCreate, as a named resource (stacks/retention.py): a failed first create leaves no bucket behind.
            removal_policy=cdk.RemovalPolicy.RETAIN,
            # A killed import pod leaves paid-for multipart parts behind.
            lifecycle_rules=[
                s3.LifecycleRule(
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(1),
                    # A re-import of a moved revision overwrites in place; do not pay for the old ~760 GB forever.
                    noncurrent_version_expiration=cdk.Duration.days(7),
                )
            ],
        )
        for bucket in (access_logs, self.weights):
            _notify_eventbridge(bucket)

        reader = iam.ManagedPolicy(
            self,
            "WeightsRead",
            statements=[
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.weights.bucket_arn]),
                iam.PolicyStatement(actions=["s3:GetObject"], resources=[self.weights.arn_for_objects(f"{plan.weights.prefix}*")]),
                iam.PolicyStatement(actions=["kms:Decrypt"], resources=[key.key_arn]),
                # The warm SGLang compile cache: restored at start, saved at the end-of-block drain
                # (pdkit/pods/compile_cache.py; multipart upload for archives over 8 MiB).
                iam.PolicyStatement(
                    actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                    resources=[self.weights.arn_for_objects(f"{cache_prefix(plan)}*")],
                ),
                iam.PolicyStatement(actions=["kms:GenerateDataKey"], resources=[key.key_arn]),
            ],
        )
        self.reader_role = self._pod_identity(
            "WeightsReader", plan, cluster, "weights-reader", reader, f"{plan.name}: serving pods read the model weights, nothing else"
        )

        writer = self._writer(plan, cluster, key)
        # The block's registry for a rehearsal, which runs the block's images (plan.image_region).
        registry = f"{self.account}.dkr.ecr.{plan.image_region}.{self.url_suffix}"
        objects = manifests.render(plan, inputs.from_plan(plan, registry=registry, weights_bucket=self.weights.bucket_name))
        self.manifest = eks.KubernetesManifest(self, "Objects", cluster=cluster, manifest=objects, overwrite=True)

        cdk.CfnOutput(self, "WeightsBucket", value=self.weights.bucket_name)
        cdk.CfnOutput(self, "WeightsPrefix", value=plan.weights.prefix)
        cdk.CfnOutput(self, "Namespace", value=names.namespace(plan))
        self._acknowledge(plan, reader, access_logs)
        self._acknowledge_writer(plan, writer)

    def _acknowledge(self, plan: Plan, reader: iam.ManagedPolicy, access_logs: s3.Bucket) -> None:
        acknowledge(self.weights, {"NIST.800.53.R5-S3BucketReplicationEnabled": NOT_REPLICATED})
        acknowledge(
            access_logs,
            {
                "AwsSolutions-S1": "This is the access-log bucket of the weights bucket; logging its own access would log forever.",
                "NIST.800.53.R5-S3BucketLoggingEnabled": "This is the access-log bucket of the weights bucket; logging its own access would log forever.",
                "NIST.800.53.R5-S3BucketReplicationEnabled": "Access logs of a re-importable weights copy; a second-region copy is not worth its cost here.",
                "NIST.800.53.R5-S3DefaultEncryptionKMS": "S3 server access log delivery writes only to SSE-S3 buckets; SSE-KMS targets silently receive nothing.",
            },
        )
        acknowledge(
            reader,
            {
                f"AwsSolutions-IAM5[Resource::<{self.resolve(self._logical(self.weights))}.Arn>/{plan.weights.prefix}*]": "Read access to the objects under this model's prefix in the kit's own weights bucket; object keys are the checkpoint's file names.",
                f"AwsSolutions-IAM5[Resource::<{self.resolve(self._logical(self.weights))}.Arn>/{cache_prefix(plan)}*]": "Read and write of this deployment's compile-cache archives in the kit's own weights bucket; each key is a hash of the SGLang version, image and command line, unknown before render.",
            },
        )

    def _writer(self, plan: Plan, cluster: eks.ICluster, key: kms.Key) -> iam.ManagedPolicy:
        """The import Job's identity (`pdkit weights import`): write the model's prefix, nothing else."""
        prefix = plan.weights.prefix
        statements = [
            # ListBucket makes HeadObject answer 404 (not 403) for a file not imported yet.
            iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.weights.bucket_arn]),
            # GetObject: HeadObject for resuming, and reading the previous manifest.
            iam.PolicyStatement(
                actions=["s3:PutObject", "s3:GetObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                resources=[self.weights.arn_for_objects(f"{prefix}*")],
            ),
            # Only the manifest is ever deleted (one of another commit, before its files change).
            iam.PolicyStatement(actions=["s3:DeleteObject"], resources=[self.weights.arn_for_objects(f"{prefix}{MANIFEST_NAME}")]),
            # SSE-KMS: GenerateDataKey for each object, Decrypt to complete multipart uploads and read the manifest.
            iam.PolicyStatement(actions=["kms:GenerateDataKey", "kms:Decrypt"], resources=[key.key_arn]),
        ]
        token = plan.weights.hf_token_secret_arn
        if token:
            statements.append(iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[token]))
        writer = iam.ManagedPolicy(self, "WeightsWrite", statements=statements)
        self.writer_role = self._pod_identity(
            "WeightsWriter",
            plan,
            cluster,
            "weights-writer",
            writer,
            f"{plan.name}: the weights import Job writes the model's prefix in the weights bucket",
        )
        return writer

    def _pod_identity(
        self, id_: str, plan: Plan, cluster: eks.ICluster, purpose: str, policy: iam.ManagedPolicy, description: str
    ) -> iam.Role:
        """A role for the pods of one service account: EKS Pod Identity assumes it with session tags."""
        role = iam.Role(
            self,
            f"{id_}Role",
            assumed_by=pod_identity_principal(
                cluster_name=plan.cluster_name, namespace=names.namespace(plan), service_account=names.service_account(plan, purpose)
            ),
            managed_policies=[policy],
            description=description,
        )
        eks_l1.CfnPodIdentityAssociation(
            self,
            f"{id_}Association",
            cluster_name=cluster.cluster_name,
            namespace=names.namespace(plan),
            service_account=names.service_account(plan, purpose),
            role_arn=role.role_arn,
        )
        return role

    def _acknowledge_writer(self, plan: Plan, writer: iam.ManagedPolicy) -> None:
        acknowledge(
            writer,
            {
                f"AwsSolutions-IAM5[Resource::<{self.resolve(self._logical(self.weights))}.Arn>/{plan.weights.prefix}*]": "The import Job writes the objects under this model's prefix in the kit's own weights bucket; object keys are the checkpoint's file names, unknown until the Hub lists them.",
            },
        )

    def _logical(self, bucket: s3.Bucket) -> str:
        cfn = bucket.node.default_child
        assert isinstance(cfn, cdk.CfnResource)
        return str(self.resolve(cfn.logical_id))


def _notify_eventbridge(bucket: s3.Bucket) -> None:
    """Object events go to the default event bus (free for S3 to deliver; nothing consumes them yet): AWS Control
    Tower (CT.S3.PR.4) rejects buckets without any notification. Set on the bucket itself because the L2's
    `event_bridge_enabled` adds a custom-resource Lambda, which CT.LAMBDA.PR.3 would reject in turn."""
    cfn = bucket.node.default_child
    assert isinstance(cfn, s3.CfnBucket)
    cfn.notification_configuration = s3.CfnBucket.NotificationConfigurationProperty(
        event_bridge_configuration=s3.CfnBucket.EventBridgeConfigurationProperty(event_bridge_enabled=True)
    )
