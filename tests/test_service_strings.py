"""Every string the templates hand to a service, against that service's documented constraint.

CloudFormation passes names, descriptions and tags through to the service API, and the service refuses the
first create when one breaks its rule: an apostrophe in a security-group rule description fails the whole
stack (EC2 allows only `a-zA-Z0-9. _-:/()#,@[]+=&;{}!$*`, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_IpRange.html),
and neither cfn-lint nor cdk-nag checks rule descriptions. So one table holds each constraint with its source:
where the botocore service model carries the constraint (min, max, pattern of the API's input shape) it is
read from there, so it is AWS's own; where the model is silent (EC2 declares every string as a bare String)
the constraint is spelled from the API reference page cited beside it.

The check runs over every stack of every shipped profile (config/*.yaml). A value an intrinsic makes
resolvable (Fn::Join of literals, pseudo parameters, a Ref to a resource named by a literal, a
Fn::GetStackOutput) is resolved first; what only the deploy knows is skipped, counted and bounded.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import botocore.session
import pytest
import regex  # the patterns of the botocore model use \p{L}-style classes (pinned via cfn-lint, requirements-dev.txt)

from pdkit.model import profile_files, service_names
from tests.fixtures.templates import UNRESOLVED, Template, at, profiles, resolve, templates_of

API = "https://docs.aws.amazon.com/{guide}/latest/APIReference/API_{operation}.html"
GUIDES = {
    "iam": "IAM",
    "lambda": "lambda",
    "logs": "AmazonCloudWatchLogs",
    "kms": "kms",
    "ecr": "AmazonECR",
    "imagebuilder": "imagebuilder",
    "codebuild": "codebuild",
    "events": "eventbridge",
    "cloudwatch": "AmazonCloudWatch",
    "eks": "eks",
    "ssm": "systems-manager",
    "resourcegroupstaggingapi": "resourcegroupstagging",
}


@dataclass(frozen=True)
class Rule:
    """What a service accepts for one string, and where that is written."""

    source: str
    max_len: int | None = None
    min_len: int = 0
    pattern: str | None = None  # matched against the whole string
    reserved_prefix: str | None = None  # case-insensitive
    check: Callable[[str], str | None] | None = None  # a whole rule the kit already has (its problem, or None)

    def problems(self, value: str) -> list[str]:
        found = []
        if self.check is not None and (problem := self.check(value)):
            found.append(problem)
        if self.max_len is not None and len(value) > self.max_len:
            found.append(f"{len(value)} characters, at most {self.max_len}")
        if len(value) < self.min_len:
            found.append(f"{len(value)} characters, at least {self.min_len}")
        if self.pattern is not None and not regex.fullmatch(self.pattern, value):
            found.append(f"does not match {self.pattern}")
        if self.reserved_prefix and value.lower().startswith(self.reserved_prefix):
            found.append(f"starts with the reserved {self.reserved_prefix!r}")
        return found


@functools.cache
def _model(service: str) -> Any:
    return botocore.session.get_session().get_service_model(service)


def api(service: str, operation: str, member: str) -> Rule:
    """The constraint botocore's model gives an operation's input member (the model AWS generates its SDKs from)."""
    shape = _model(service).operation_model(operation).input_shape.members[member]
    meta = shape.metadata
    assert {"min", "max", "pattern"} & set(meta), f"botocore has no constraint on {service} {operation}.{member}: cite a page instead"
    return Rule(
        source=API.format(guide=GUIDES[service], operation=operation),
        max_len=meta.get("max"),
        min_len=meta.get("min", 0),
        pattern=meta.get("pattern"),
    )


def api_shape(service: str, shape: str, member: str, operation: str) -> Rule:
    """The constraint of a member of a nested input shape (Image Builder's distribution settings)."""
    meta = _model(service).shape_for(shape).members[member].metadata
    assert {"min", "max", "pattern"} & set(meta), f"botocore has no constraint on {service} {shape}.{member}: cite a page instead"
    return Rule(
        source=API.format(guide=GUIDES[service], operation=operation) + f" ({shape}.{member})",
        max_len=meta.get("max"),
        min_len=meta.get("min", 0),
        pattern=meta.get("pattern"),
    )


# EC2's model declares these as bare strings; the API reference states the rule.
EC2_TEXT = r"[a-zA-Z0-9. _\-:/()#,@\[\]+=&;{}!$*]*"
EC2_RULE_DESCRIPTION = Rule(
    source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_IpRange.html (also API_Ipv6Range, API_UserIdGroupPair, API_PrefixListId)",
    max_len=255,
    pattern=EC2_TEXT,
)
EC2_GROUP_DESCRIPTION = Rule(
    source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateSecurityGroup.html (Description)",
    max_len=255,
    pattern=EC2_TEXT,
)
EC2_GROUP_NAME = Rule(
    source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateSecurityGroup.html (GroupName: cannot start with sg-)",
    max_len=255,
    pattern=EC2_TEXT,
    reserved_prefix="sg-",
)
EC2_TAG_KEY = Rule(
    source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Tag.html (127 Unicode characters, may not begin with aws:)",
    max_len=127,
    min_len=1,
    reserved_prefix="aws:",
)
EC2_TAG_VALUE = Rule(source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_Tag.html (256 Unicode characters)", max_len=256)
# The Resource Groups Tagging API's model states the limits every tagging service shares; the `aws:` prefix is
# reserved for AWS in all of them (e.g. https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-properties-ecs-service-tag.html).


def _tagging(member: str) -> Rule:
    shape = _model("resourcegroupstaggingapi").shape_for(member)
    return Rule(
        source=API.format(guide=GUIDES["resourcegroupstaggingapi"], operation="TagResources") + f" ({member})",
        max_len=shape.metadata.get("max"),
        min_len=shape.metadata.get("min", 0),
        reserved_prefix="aws:" if member == "TagKey" else None,
    )


TAG_KEY = _tagging("TagKey")
TAG_VALUE = _tagging("TagValue")
# EKS's model declares nodegroupName a bare string; EKS's console rule, as the Terraform AWS provider documents it.
EKS_NODEGROUP_NAME = Rule(
    source="https://registry.terraform.io/providers/hashicorp/aws/latest/docs/resources/eks_node_group (node_group_name: at most 63 "
    "characters, starts with a letter or digit, then letters, digits, hyphens and underscores)",
    max_len=63,
    min_len=1,
    pattern=r"[A-Za-z0-9][A-Za-z0-9_-]*",
)
# The CloudFormation resource schema of AWS::S3::Bucket (BucketName: maxLength 63, pattern), which points to
# https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html (3 to 63 characters).
S3_BUCKET_NAME = Rule(
    source="https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html",
    # The kit's one reading of S3's naming rules (pdkit render refuses a --weights-bucket by the same function).
    check=service_names.bucket_problem,
)
# AWS::APS::Scraper / Workspace Alias: the CloudFormation resource schemas (the amp model declares no limit).
APS_ALIAS = Rule(
    source="https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-aps-scraper.html (Alias)",
    max_len=100,
    min_len=1,
    pattern=r"[0-9A-Za-z][-.0-9A-Z_a-z]*",
)

# Stated in the botocore model's documentation of the member (the API reference's text), not as min/max/pattern.
SNS_TOPIC_NAME = Rule(
    source="https://docs.aws.amazon.com/sns/latest/api/API_CreateTopic.html (Name: ASCII letters, numbers, underscores, hyphens, 1-256)",
    max_len=256,
    min_len=1,
    pattern=r"[A-Za-z0-9_-]+(\.fifo)?",
)
SQS_QUEUE_NAME = Rule(
    source="https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_CreateQueue.html (QueueName: up to 80 alphanumerics, - and _)",
    max_len=80,
    min_len=1,
    pattern=r"[A-Za-z0-9_-]+(\.fifo)?",
)
PLACEMENT_GROUP_NAME = Rule(
    source="https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreatePlacementGroup.html (GroupName: up to 255 ASCII characters)",
    max_len=255,
    pattern=r"[\x00-\x7f]*",
)

SG_RULES = ("SecurityGroupIngress[].Description", "SecurityGroupEgress[].Description")
CONSTRAINTS: dict[str, dict[str, Rule]] = {
    "AWS::EC2::SecurityGroup": {
        "GroupDescription": EC2_GROUP_DESCRIPTION,
        "GroupName": EC2_GROUP_NAME,
        **dict.fromkeys(SG_RULES, EC2_RULE_DESCRIPTION),
    },
    "AWS::EC2::SecurityGroupIngress": {"Description": EC2_RULE_DESCRIPTION},
    "AWS::EC2::SecurityGroupEgress": {"Description": EC2_RULE_DESCRIPTION},
    "AWS::IAM::Role": {
        "RoleName": api("iam", "CreateRole", "RoleName"),
        "Path": api("iam", "CreateRole", "Path"),
        "Description": api("iam", "CreateRole", "Description"),
        "Policies[].PolicyName": api("iam", "PutRolePolicy", "PolicyName"),
    },
    "AWS::IAM::ManagedPolicy": {
        "ManagedPolicyName": api("iam", "CreatePolicy", "PolicyName"),
        "Path": api("iam", "CreatePolicy", "Path"),
        "Description": api("iam", "CreatePolicy", "Description"),
    },
    "AWS::IAM::Policy": {"PolicyName": api("iam", "PutRolePolicy", "PolicyName")},
    "AWS::IAM::InstanceProfile": {
        "InstanceProfileName": api("iam", "CreateInstanceProfile", "InstanceProfileName"),
        "Path": api("iam", "CreateInstanceProfile", "Path"),
    },
    "AWS::EKS::Cluster": {"Name": api("eks", "CreateCluster", "name")},
    "AWS::EKS::Nodegroup": {"NodegroupName": EKS_NODEGROUP_NAME},
    "AWS::Lambda::Function": {
        "FunctionName": api("lambda", "CreateFunction", "FunctionName"),
        "Description": api("lambda", "CreateFunction", "Description"),
    },
    "AWS::Logs::LogGroup": {"LogGroupName": api("logs", "CreateLogGroup", "logGroupName")},
    "AWS::KMS::Key": {"Description": api("kms", "CreateKey", "Description")},
    "AWS::KMS::Alias": {"AliasName": api("kms", "CreateAlias", "AliasName")},
    "AWS::ECR::Repository": {"RepositoryName": api("ecr", "CreateRepository", "repositoryName")},
    "AWS::S3::Bucket": {"BucketName": S3_BUCKET_NAME},
    "AWS::SNS::Topic": {"TopicName": SNS_TOPIC_NAME},
    "AWS::SQS::Queue": {"QueueName": SQS_QUEUE_NAME},
    "AWS::EC2::PlacementGroup": {"GroupName": PLACEMENT_GROUP_NAME},
    "AWS::CodeBuild::Project": {
        "Name": api("codebuild", "CreateProject", "name"),
        "Description": api("codebuild", "CreateProject", "description"),
    },
    "AWS::Events::Rule": {"Name": api("events", "PutRule", "Name"), "Description": api("events", "PutRule", "Description")},
    "AWS::CloudWatch::Alarm": {
        "AlarmName": api("cloudwatch", "PutMetricAlarm", "AlarmName"),
        "AlarmDescription": api("cloudwatch", "PutMetricAlarm", "AlarmDescription"),
    },
    "AWS::SSM::Parameter": {"Name": api("ssm", "PutParameter", "Name"), "Description": api("ssm", "PutParameter", "Description")},
    "AWS::APS::Scraper": {"Alias": APS_ALIAS},
    # EKS documents no pattern for add-on names (the name must be one DescribeAddonVersions returns, which
    # preflight checks); the CloudFormation resource schema of AWS::EKS::Addon requires at least one character.
    "AWS::EKS::Addon": {
        "AddonName": Rule(
            source="https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-eks-addon.html (AddonName)",
            min_len=1,
        )
    },
    "AWS::Lambda::LayerVersion": {"Description": api("lambda", "PublishLayerVersion", "Description")},
    **{
        f"AWS::ImageBuilder::{kind}": {
            "Name": api("imagebuilder", f"Create{kind}", "name"),
            "Description": api("imagebuilder", f"Create{kind}", "description"),
        }
        for kind in ("Component", "ImageRecipe", "ImagePipeline", "InfrastructureConfiguration", "DistributionConfiguration")
    },
}
CONSTRAINTS["AWS::ImageBuilder::DistributionConfiguration"] |= {
    "Distributions[].AmiDistributionConfiguration.Name": api_shape(
        "imagebuilder", "AmiDistributionConfiguration", "name", "CreateDistributionConfiguration"
    ),
    "Distributions[].AmiDistributionConfiguration.Description": api_shape(
        "imagebuilder", "AmiDistributionConfiguration", "description", "CreateDistributionConfiguration"
    ),
    "Distributions[].SsmParameterConfigurations[].ParameterName": api_shape(
        "imagebuilder", "SsmParameterConfiguration", "parameterName", "CreateDistributionConfiguration"
    ),
}
EC2_TAGGED = "AWS::EC2::"
# Values only the deploy knows: today the two kubectl-provider log groups aws_eks_v2 names after its functions
# ("/aws/lambda/" + a name CloudFormation generates). Bounded, so a change that hides checked strings behind
# intrinsics shows here instead of silently checking less.
MAX_UNRESOLVED = 2


@dataclass(frozen=True)
class Checked:
    where: str
    value: str
    rule: Rule


def _tags(resource: dict[str, Any]) -> Iterator[tuple[str, Any, Any]]:
    """(path, key, value) of each tag: the list form most types use, the map form of EKS and SSM, and launch-template tag specifications."""
    props = resource.get("Properties", {})
    tags = props.get("Tags")
    if isinstance(tags, list):
        yield from ((f"Tags[{i}]", t.get("Key"), t.get("Value")) for i, t in enumerate(tags))
    elif isinstance(tags, dict):
        yield from ((f"Tags.{k}", k, v) for k, v in tags.items())
    for where, specs in (
        ("LaunchTemplateData.", props.get("LaunchTemplateData", {}).get("TagSpecifications", [])),
        ("", props.get("TagSpecifications", [])),
    ):
        for i, spec in enumerate(specs):
            yield from ((f"{where}TagSpecifications[{i}].Tags[{j}]", t["Key"], t["Value"]) for j, t in enumerate(spec.get("Tags", [])))


def strings_of(template: Template) -> tuple[list[Checked], list[str]]:
    """Every (value, rule) the table applies to in one template, and where a value could not be resolved."""
    checked: list[Checked] = []
    unresolved: list[str] = []

    def add(where: str, raw: Any, rule: Rule) -> None:
        value = resolve(raw, template)
        if value is UNRESOLVED:
            unresolved.append(f"{where}: {raw}")
        else:
            checked.append(Checked(where, str(value), rule))

    for logical_id, resource in template.resources.items():
        kind = resource["Type"]
        for path, rule in CONSTRAINTS.get(kind, {}).items():
            for spelled, raw in at(resource.get("Properties", {}), path):
                add(f"{template.where(logical_id)} {spelled}", raw, rule)
        ec2 = kind.startswith(EC2_TAGGED)
        for spelled, key, value in _tags(resource):
            add(f"{template.where(logical_id)} {spelled} key", key, EC2_TAG_KEY if ec2 else TAG_KEY)
            add(f"{template.where(logical_id)} {spelled} value", value, EC2_TAG_VALUE if ec2 else TAG_VALUE)
    return checked, unresolved


@pytest.mark.parametrize("profile", profiles())
def test_every_string_a_service_receives_meets_its_documented_constraint(profile):
    """A first create fails on the first string a service refuses (the access host's rule descriptions carried
    apostrophes, which EC2 refuses: API_IpRange). Every name, description and tag of every stack of this profile
    is held to its service's rule, each rule cited in CONSTRAINTS."""
    checked, unresolved = [], []
    for template in templates_of(profile):
        found, skipped = strings_of(template)
        checked += found
        unresolved += skipped
    bad = [f"{c.where} = {c.value!r}: {'; '.join(c.rule.problems(c.value))} ({c.rule.source})" for c in checked if c.rule.problems(c.value)]
    assert not bad, "\n".join(bad)
    assert len(unresolved) <= MAX_UNRESOLVED, "\n".join(unresolved)
    assert len(checked) > 200, f"only {len(checked)} strings checked"


def _default() -> str:
    return profile_files.default_profile_name()


def test_rule_descriptions_of_the_cluster_stack_reach_the_check():
    """The table covers the rules that broke the first create: the access host's egress rule descriptions."""
    checked, _ = strings_of(next(t for t in templates_of(_default()) if t.stack == "cluster"))
    described = [c for c in checked if "SecurityGroupEgress" in c.where and c.rule is EC2_RULE_DESCRIPTION]
    assert any("router" in c.value for c in described)


@pytest.mark.parametrize(
    ("rule", "value"),
    [
        (EC2_RULE_DESCRIPTION, "SSM, the EKS API and the router's load balancer"),
        (EC2_RULE_DESCRIPTION, "x" * 256),
        (EC2_GROUP_DESCRIPTION, "caf\u00e9 access"),
        (EC2_GROUP_NAME, "sg-kit"),
        (EC2_TAG_KEY, "aws:cloudformation:stack-name"),
        (EC2_TAG_KEY, "k" * 128),
        (TAG_KEY, "AWS:owner"),
        (EKS_NODEGROUP_NAME, "-prefill"),
        (EKS_NODEGROUP_NAME, "p" * 64),
        (S3_BUCKET_NAME, "Weights_Bucket"),
        (CONSTRAINTS["AWS::IAM::Role"]["RoleName"], "r" * 65),
        (CONSTRAINTS["AWS::IAM::Role"]["Path"], "no-slashes"),
        (CONSTRAINTS["AWS::Logs::LogGroup"]["LogGroupName"], "/aws/eks/glm51 2p2d/cluster"),
        (CONSTRAINTS["AWS::ECR::Repository"]["RepositoryName"], "glm51-2p2d/SGLang"),
        (CONSTRAINTS["AWS::ImageBuilder::ImageRecipe"]["Name"], "glm51-2p2d.gpu-node"),
        (CONSTRAINTS["AWS::CodeBuild::Project"]["Name"], "-build"),
        (CONSTRAINTS["AWS::Lambda::Function"]["Description"], "d" * 257),
        (CONSTRAINTS["AWS::ImageBuilder::DistributionConfiguration"]["Distributions[].AmiDistributionConfiguration.Name"], "gpu node (v2)"),
        (CONSTRAINTS["AWS::EKS::Addon"]["AddonName"], ""),
        (SNS_TOPIC_NAME, "glm51 block events"),
        (SQS_QUEUE_NAME, "q" * 81),
    ],
)
def test_each_rule_refuses_what_its_service_refuses(rule, value):
    """Each rule fires on a value its source refuses (the apostrophe is the one that broke the cluster stack)."""
    assert rule.problems(value)


@pytest.mark.parametrize(
    ("rule", "value"),
    [
        (EC2_RULE_DESCRIPTION, "SSM, the EKS API and the router load balancer (HTTPS)"),
        (EC2_TAG_KEY, "pdkit:deployment"),
        (EKS_NODEGROUP_NAME, "glm51-2p2d-prefill"),
        (S3_BUCKET_NAME, "glm51-2p2d-weights-123456789012-eu-south-2"),
        (CONSTRAINTS["AWS::Logs::LogGroup"]["LogGroupName"], "/aws/eks/glm51-2p2d/cluster"),
        (CONSTRAINTS["AWS::ECR::Repository"]["RepositoryName"], "glm51-2p2d/sglang-efa"),
    ],
)
def test_each_rule_admits_what_the_kit_names(rule, value):
    assert not rule.problems(value)


def test_launch_template_tag_specifications_are_checked():
    """Tags a launch template hands to the instances and volumes it launches are EC2 tags too (API_Tag)."""
    lt = {
        "Type": "AWS::EC2::LaunchTemplate",
        "Properties": {
            "LaunchTemplateData": {"TagSpecifications": [{"ResourceType": "instance", "Tags": [{"Key": "aws:x", "Value": "v"}]}]}
        },
    }
    found = list(_tags(lt))
    assert found == [("LaunchTemplateData.TagSpecifications[0].Tags[0]", "aws:x", "v")]
    assert EC2_TAG_KEY.problems(found[0][1])


def test_resolve_reads_joins_pseudo_parameters_and_named_refs(kit):
    """The checks see what CloudFormation will send: Fn::Join of literals and pseudo parameters, a Ref to the
    EKS cluster (its Ref is its name), and a Fn::GetStackOutput of another stack."""
    cluster = next(t for t in templates_of(_default()) if t.stack == "cluster")
    cluster_id = next(k for k, r in cluster.resources.items() if r["Type"] == "AWS::EKS::Cluster")
    joined = {"Fn::Join": ["", ["/aws/containerinsights/", {"Ref": cluster_id}, "/", {"Ref": "AWS::Region"}]]}
    assert resolve(joined, cluster) == f"/aws/containerinsights/{kit.plan.cluster_name}/{kit.plan.region}"
    assert resolve({"Fn::GetAtt": [cluster_id, "Arn"]}, cluster) is UNRESOLVED


def test_the_purchase_kit_hands_no_refused_string(bought):
    """The kit that buys its block (capacity.purchase) adds the purchase resources: the same table holds."""
    from tests.fixtures.templates import templates_of_kit

    checked = [c for t in templates_of_kit(bought, "bought") for c in strings_of(t)[0]]
    bad = [f"{c.where} = {c.value!r}: {'; '.join(c.rule.problems(c.value))}" for c in checked if c.rule.problems(c.value)]
    assert not bad, "\n".join(bad)
    assert len(checked) > 200


def _probe_stack():
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    from stacks.kit_stack import KitStack

    stack = KitStack(cdk.App(), "Probe", zones=["eu-south-2a"], env=cdk.Environment(region="eu-south-2"))
    vpc = ec2.Vpc(stack, "Vpc", availability_zones=["eu-south-2a"], nat_gateways=0, subnet_configuration=[])
    return stack, vpc


@pytest.mark.parametrize("inline", [True, False])
def test_synth_refuses_a_rule_description_ec2_refuses(inline):
    """The access host's old egress description, "the router's internal load balancer", fails at `cdk synth` with
    the construct and the fix, before anything is created (stacks/ec2_text.py): inline rules of a group and a
    standalone rule resource alike."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    stack, vpc = _probe_stack()
    group = ec2.SecurityGroup(stack, "Group", vpc=vpc, allow_all_outbound=False, description="probe")
    if inline:
        group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(80), "the router's internal load balancer (HTTP)")
    else:
        ec2.CfnSecurityGroupIngress(
            stack,
            "Rule",
            group_id=group.security_group_id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            cidr_ip="10.0.0.0/8",
            description="caf\u00e9 clients",
        )
    with pytest.raises(Exception, match=r"security-group description .* has characters EC2 refuses.*Fix: use only"):
        cdk.App.of(stack).synth()


def test_synth_admits_the_descriptions_ec2_accepts():
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2

    stack, vpc = _probe_stack()
    group = ec2.SecurityGroup(stack, "Group", vpc=vpc, allow_all_outbound=False, description="probe: no inbound, HTTPS out")
    group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(80), "the router internal load balancer (HTTP)")
    cdk.App.of(stack).synth()
