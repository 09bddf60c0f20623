"""What a failed first create leaves behind: a retained resource with a fixed name blocks the retry.

`DeletionPolicy: Retain` also keeps what a failed first create made, and the next deploy then fails on
"already exists" for every resource whose name is fixed (the EKS and Container Insights log groups, the
ECR repositories, the weights bucket, the Image Builder logs). `RetainExceptOnCreate` keeps them on update
and delete but deletes what a failed create made (CDK `RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE`):
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html

The aspect applies that to every named, retained resource of a kit stack, the kit's own and those CDK or a
construct library generates. A resource without a fixed name keeps plain Retain: the next create gives it
a new name, so it blocks nothing, and a function's log group then still explains why the create failed.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
import jsii
from constructs import IConstruct

# The property that fixes the physical name, per type (CloudFormation "Name type":
# https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-name.html).
NAME_PROPERTY = {
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::SSM::Parameter": "Name",
    "AWS::SecretsManager::Secret": "Name",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::KMS::Alias": "AliasName",
}


def has_fixed_name(resource: cdk.CfnResource) -> bool:
    """Whether the template sets the resource's name (a literal, or an intrinsic of one: both survive a rollback)."""
    prop = NAME_PROPERTY.get(resource.cfn_resource_type)
    if prop is None:
        return False
    # L1 classes keep their properties camelCase, a plain CfnResource as written.
    props: dict[str, Any] = resource._cfn_properties or {}
    value = props.get(prop, props.get(prop[0].lower() + prop[1:]))
    return cdk.Stack.of(resource).resolve(value) is not None


@jsii.implements(cdk.IAspect)
class RetainExceptOnCreateWhenNamed:
    def visit(self, node: IConstruct) -> None:
        if isinstance(node, cdk.CfnResource) and node.cfn_options.deletion_policy == cdk.CfnDeletionPolicy.RETAIN and has_fixed_name(node):
            node.cfn_options.deletion_policy = cdk.CfnDeletionPolicy.RETAIN_EXCEPT_ON_CREATE
