"""A CloudWatch Logs group encrypted with a customer-managed KMS key and a fixed retention."""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct


class EncryptedLogGroup(Construct):
    def __init__(self, scope: Construct, id_: str, *, key: kms.IKey, retention_days: int, log_group_name: str | None = None) -> None:
        super().__init__(scope, id_)
        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            log_group_name=log_group_name,
            encryption_key=key,
            # RetainExceptOnCreate instead when named (stacks/retention.py): a failed create's group must not block the retry.
            removal_policy=cdk.RemovalPolicy.RETAIN,
        )
        # RetentionDays is a named enum in Python; the profile already validated the day count.
        cfn = self.log_group.node.default_child
        assert isinstance(cfn, logs.CfnLogGroup)
        cfn.retention_in_days = retention_days


def logs_key(scope: Construct, id_: str, *, description: str) -> kms.Key:
    """A rotating key that CloudWatch Logs in this region may use (it is not granted by default).

    https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html
    """
    stack = cdk.Stack.of(scope)
    key = kms.Key(scope, id_, description=description, enable_key_rotation=True, removal_policy=cdk.RemovalPolicy.RETAIN)
    key.add_to_resource_policy(
        iam.PolicyStatement(
            principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
            actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
            resources=["*"],
            conditions={
                "ArnLike": {"kms:EncryptionContext:aws:logs:arn": f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"}
            },
        )
    )
    return key
