"""A failed first create can be retried: nothing with a fixed name outlives its rollback.

`DeletionPolicy: Retain` keeps what a failed first create made, and the next deploy fails on "already exists"
for every fixed name; `RetainExceptOnCreate` keeps the resource on update and delete only
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html). The rule
lives in stacks/retention.py, an aspect of every kit stack.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs
from aws_cdk.assertions import Template as CdkTemplate

from pdkit.model import profile_files
from stacks.kit_stack import KitStack
from stacks.retention import RetainExceptOnCreateWhenNamed
from tests.fixtures.templates import profiles, templates_of

# The property that names each type's physical resource (CloudFormation "Name type",
# https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-name.html).
PHYSICAL_NAME = {
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::SSM::Parameter": "Name",
    "AWS::SecretsManager::Secret": "Name",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::KMS::Alias": "AliasName",
    "AWS::IAM::Role": "RoleName",
    "AWS::Lambda::Function": "FunctionName",
}


@pytest.mark.parametrize("profile", profiles())
def test_no_retained_resource_has_a_fixed_name(profile):
    """A fixed name kept by a failed create's rollback fails the retry with "already exists": every named
    resource of every stack is RetainExceptOnCreate (or deleted), never plain Retain."""
    blocking = [
        f"{t.where(logical_id)} {resource['Type']} {resource['Properties'][PHYSICAL_NAME[resource['Type']]]}"
        for t in templates_of(profile)
        for logical_id, resource in t.resources.items()
        if resource.get("DeletionPolicy") == "Retain" and PHYSICAL_NAME.get(resource["Type"]) in resource.get("Properties", {})
    ]
    assert not blocking, "\n".join(blocking)


def test_the_named_data_is_still_kept_on_update_and_delete(kit):
    """Retry-safe is not delete-happy: the EKS and Container Insights log groups, the ECR repositories, the weights
    bucket and the Image Builder logs survive a stack delete and a replacement, as before."""
    kept = {
        repr(r["Properties"][PHYSICAL_NAME[r["Type"]]])
        for t in templates_of(profile_files.default_profile_name())
        for r in t.resources.values()
        if r.get("DeletionPolicy") == "RetainExceptOnCreate" and r.get("UpdateReplacePolicy") == "Retain"
    }
    text = " ".join(kept)
    for name in (
        f"/aws/eks/{kit.plan.cluster_name}/cluster",
        "/aws/containerinsights/",
        f"{kit.plan.name}/sglang-efa",
        f"{kit.plan.name}-weights-",
        "/aws/imagebuilder/",
    ):
        assert name in text, name


def _stack() -> cdk.Stack:
    return KitStack(cdk.App(), "Retention", zones=["eu-south-2a"])


@pytest.mark.parametrize(
    ("name", "policy", "expected"),
    [
        ("/kit/fixed", cdk.RemovalPolicy.RETAIN, "RetainExceptOnCreate"),
        (None, cdk.RemovalPolicy.RETAIN, "Retain"),
        ("/kit/fixed", cdk.RemovalPolicy.DESTROY, "Delete"),
    ],
)
def test_the_aspect_changes_only_retained_named_resources(name, policy, expected):
    """Named and retained -> RetainExceptOnCreate; an unnamed group keeps Retain (a new create names it anew, and
    its logs explain the failure); a deleted resource stays deleted."""
    stack = _stack()
    logs.LogGroup(stack, "Group", log_group_name=name, removal_policy=policy)
    (group,) = CdkTemplate.from_stack(stack).find_resources("AWS::Logs::LogGroup").values()
    assert group["DeletionPolicy"] == expected


def test_the_aspect_reads_a_name_given_as_an_intrinsic():
    """The Container Insights groups are named from the cluster's Ref: still a fixed name on a retry."""
    stack = cdk.Stack(cdk.App(), "Plain")
    cdk.Aspects.of(stack).add(RetainExceptOnCreateWhenNamed())
    logs.LogGroup(stack, "Group", log_group_name=f"/aws/x/{stack.stack_name}", removal_policy=cdk.RemovalPolicy.RETAIN)
    (group,) = CdkTemplate.from_stack(stack).find_resources("AWS::Logs::LogGroup").values()
    assert group["DeletionPolicy"] == "RetainExceptOnCreate"


def test_the_purchase_kit_retains_no_fixed_name(bought):
    from tests.fixtures.templates import templates_of_kit

    blocking = [
        f"{t.where(logical_id)} {resource['Type']}"
        for t in templates_of_kit(bought, "bought")
        for logical_id, resource in t.resources.items()
        if resource.get("DeletionPolicy") == "Retain" and PHYSICAL_NAME.get(resource["Type"]) in resource.get("Properties", {})
    ]
    assert not blocking, "\n".join(blocking)
