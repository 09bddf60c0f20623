"""Policy packs (AwsSolutions, NIST 800-53 rev5) inside pytest: zero unacknowledged findings."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2

from pdkit.model import profile_files
from stacks.kit_function import VPC_ACCESS_ACTIONS
from stacks.policy import acknowledge
from tests.conftest import kit_of, new_app, policy_findings


@pytest.mark.parametrize("profile", [profile_files.default_profile_name(), "glm51-fp8-4p4d"])
def test_no_unacknowledged_findings(profile):
    """Every finding is either fixed or acknowledged next to its resource with a reason, in the default profile and
    a second one."""
    assert policy_findings(kit_of(profile).app) == []


def _vpc_without_flow_logs() -> cdk.App:
    app = new_app()
    stack = cdk.Stack(app, "Probe", env=cdk.Environment(region="eu-south-2"))
    ec2.Vpc(
        stack,
        "Vpc",
        availability_zones=["eu-south-2a"],
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="p", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    return app


def test_packs_do_fire():
    """The harness is live: a VPC without flow logs is reported (AwsSolutions-VPC7)."""
    assert any(v.startswith("AwsSolutions-VPC7 at Probe/Vpc") for v in policy_findings(_vpc_without_flow_logs()))


def test_acknowledgment_silences_exactly_its_rule():
    app = _vpc_without_flow_logs()
    vpc = app.node.find_child("Probe").node.find_child("Vpc")
    acknowledge(vpc, {"AwsSolutions-VPC7": "probe VPC in a unit test; it exists only to show the acknowledgment is scoped"})
    remaining = policy_findings(app)
    assert not any(v.startswith("AwsSolutions-VPC7") for v in remaining)
    assert any(v.startswith("NIST.800.53.R5-VPCFlowLogsEnabled") for v in remaining)


def test_acknowledgment_needs_a_real_reason():
    app = _vpc_without_flow_logs()
    with pytest.raises(ValueError, match="needs a real reason"):
        acknowledge(app, {"AwsSolutions-VPC7": "TODO"})


# --- IAM: no wildcard resource where the action can be scoped; no bare service-principal trust -----------------

SAR = "https://docs.aws.amazon.com/service-authorization/latest/reference/list_{}.html"
# Actions the Service Authorization Reference lists with no resource type ("you must specify all resources (*)"):
# a "*" is the only Resource they accept. Each row: the action and the SAR page that lists it.
NO_RESOURCE_TYPE = {
    "ecr:GetAuthorizationToken": SAR.format("amazonelasticcontainerregistry"),
    "ec2:DescribeCapacityReservations": SAR.format("amazonec2"),
    "ec2:DescribeCapacityBlockOfferings": SAR.format("amazonec2"),
    "ec2:DescribeInstanceTopology": SAR.format("amazonec2"),
    "ec2:DescribeNetworkInterfaces": SAR.format("amazonec2"),
    "ec2:DescribeSubnets": SAR.format("amazonec2"),
    "cloudwatch:PutMetricData": SAR.format("amazoncloudwatch"),  # scoped by cloudwatch:namespace where the kit uses it
}
# Statements granted on "*" although some of their actions take resources, each with its documented reason.
WILDCARD_EXCEPTIONS = {
    # Lambda names the network interfaces itself; "ec2:DescribeNetworkInterfaces ... only works if it's allowed on all
    # resources" and a DeleteNetworkInterface without every resource id may cut the function off its VPC
    # (https://docs.aws.amazon.com/lambda/latest/dg/configuration-vpc.html); AWSLambdaVPCAccessExecutionRole grants them on *.
    "Lambda VPC access": frozenset(VPC_ACCESS_ACTIONS),
}
# The AWS Load Balancer Controller's published IAM policy, bundled by aws-cdk-lib (aws-eks-v2 alb-controller):
# the controller creates load balancers and security groups whose names are not known in advance and scopes its
# writes with elbv2.k8s.aws/cluster tag conditions; the kit takes it as published.
VENDOR_POLICIES = ("LoadBalancerController",)


def _as_list(value):
    return value if isinstance(value, list) else [value]


def _identity_statements(template):
    for logical_id, resource in template.resources.items():
        props = resource.get("Properties", {})
        documents = []
        if resource["Type"] in ("AWS::IAM::ManagedPolicy", "AWS::IAM::Policy"):
            documents = [props["PolicyDocument"]]
        elif resource["Type"] == "AWS::IAM::Role":
            documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
        for document in documents:
            for statement in document["Statement"]:
                yield logical_id, statement


def wildcard_violations(templates) -> list[str]:
    """Allow statements on Resource "*" with an action that could be scoped, outside the listed exceptions."""
    found = []
    for template in templates:
        for logical_id, statement in _identity_statements(template):
            if statement.get("Effect") != "Allow" or "*" not in _as_list(statement.get("Resource")):
                continue
            if logical_id.startswith(VENDOR_POLICIES):
                continue
            actions = set(_as_list(statement["Action"]))
            if any(actions <= allowed for allowed in WILDCARD_EXCEPTIONS.values()):
                continue
            if scoped := sorted(a for a in actions if a not in NO_RESOURCE_TYPE):
                found.append(f"{template.where(logical_id)}: {scoped} on *")
    return found


@pytest.mark.parametrize("profile", profile_files.available_profiles())
def test_no_wildcard_resource_for_actions_that_take_resources(profile):
    """IAM statements granting Resource "*" carry only actions the Service Authorization Reference lists with no
    resource type (NO_RESOURCE_TYPE), or are one of the listed exceptions with its documented reason."""
    from tests.fixtures.templates import templates_of

    assert wildcard_violations(templates_of(profile)) == []


def test_the_wildcard_rule_fires_on_a_scopable_action():
    """s3:GetObject takes an object ARN: granting it on * is what the rule refuses."""
    from tests.fixtures.templates import Template

    body = {
        "Resources": {
            "Reader": {
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {
                    "PolicyDocument": {
                        "Statement": [{"Effect": "Allow", "Action": ["s3:GetObject", "ec2:DescribeSubnets"], "Resource": "*"}]
                    }
                },
            }
        }
    }
    (found,) = wildcard_violations([Template("probe", "probe", "probe", body, None)])
    assert "['s3:GetObject'] on *" in found


# Service principals that document no aws:SourceAccount / aws:SourceArn for a role's trust, each with its source.
TRUST_WITHOUT_SOURCE_KEYS = {
    # Instance profiles: EC2 assumes the role for the instance it is attached to, and only a principal with
    # iam:PassRole on the role can attach it; EC2's role guide documents no source keys for the trust
    # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/iam-roles-for-amazon-ec2.html).
    "ec2.amazonaws.com",
    # Execution roles: Lambda's guide documents the trust without condition keys; lambda:SourceFunctionArn narrows
    # what the credentials may do, not who assumes them (https://docs.aws.amazon.com/lambda/latest/dg/lambda-intro-execution-role.html,
    # https://docs.aws.amazon.com/lambda/latest/dg/permissions-source-function-arn.html).
    "lambda.amazonaws.com",
    # Not found in the CodeBuild User Guide's service-role page (setting-up-service-role.html) when this rule was
    # written; open item: add aws:SourceArn on the project once the guide documents it for the trust.
    "codebuild.amazonaws.com",
}
SOURCE_KEYS = ("aws:SourceAccount", "aws:SourceArn")
# EKS Pod Identity documents session-tag conditions instead (https://docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html).
POD_IDENTITY_TAGS = ("aws:RequestTag/eks-cluster-name", "aws:RequestTag/kubernetes-namespace", "aws:RequestTag/kubernetes-service-account")


def trust_violations(templates) -> list[str]:
    found = []
    for template in templates:
        for logical_id, resource in template.resources.items():
            if resource["Type"] != "AWS::IAM::Role":
                continue
            for statement in resource["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
                services = _as_list(statement.get("Principal", {}).get("Service", []))
                keys = {key for operator in statement.get("Condition", {}).values() for key in operator}
                for service in services:
                    if service in TRUST_WITHOUT_SOURCE_KEYS:
                        continue
                    wanted = POD_IDENTITY_TAGS if service == "pods.eks.amazonaws.com" else SOURCE_KEYS
                    if not set(wanted) <= keys:
                        found.append(f"{template.where(logical_id)}: {service} trusted without {sorted(set(wanted) - keys)}")
    return found


@pytest.mark.parametrize("profile", profile_files.available_profiles())
def test_service_principal_trust_carries_the_documented_source_conditions(profile):
    """A bare service principal lets the service assume the role on anyone's behalf (the confused deputy): the EKS
    cluster role and the VPC flow logs role carry aws:SourceAccount and aws:SourceArn (EKS and VPC guides), Pod
    Identity roles their cluster, namespace and service-account session tags; the exceptions are listed above."""
    from tests.fixtures.templates import templates_of

    assert trust_violations(templates_of(profile)) == []


def test_the_trust_rule_fires_on_a_bare_service_principal():
    from tests.fixtures.templates import Template

    trust = {"Statement": [{"Effect": "Allow", "Principal": {"Service": "vpc-flow-logs.amazonaws.com"}, "Action": "sts:AssumeRole"}]}
    body = {"Resources": {"FlowLogsRole": {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": trust}}}}
    (found,) = trust_violations([Template("probe", "probe", "probe", body, None)])
    assert "vpc-flow-logs.amazonaws.com trusted without ['aws:SourceAccount', 'aws:SourceArn']" in found


def test_the_purchase_kit_meets_both_rules(bought):
    """The same two rules over the kit that buys its block (capacity.purchase): its purchase function's role too."""
    from tests.fixtures.templates import templates_of_kit

    templates = templates_of_kit(bought, "bought")
    assert wildcard_violations(templates) == []
    assert trust_violations(templates) == []
    assert resource_policy_violations(templates) == []


# CloudWatch Logs documents the encryption context, not the source keys, for a key it uses:
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/logs/encrypt-log-data-kms.html ("kms:EncryptionContext:aws:logs:arn").
RESOURCE_POLICY_KEYS = {"logs": ("kms:EncryptionContext:aws:logs:arn",)}
RESOURCE_POLICIES = {"AWS::KMS::Key": "KeyPolicy", "AWS::SNS::TopicPolicy": "PolicyDocument", "AWS::SQS::QueuePolicy": "PolicyDocument"}
RESOURCE_POLICIES |= {"AWS::S3::BucketPolicy": "PolicyDocument"}


def resource_policy_violations(templates) -> list[str]:
    """Resource policies and Lambda permissions that admit a service principal without saying on whose behalf."""
    found = []
    for template in templates:
        for logical_id, resource in template.resources.items():
            props = resource.get("Properties", {})
            if resource["Type"] == "AWS::Lambda::Permission":
                if str(props.get("Principal", "")).endswith(".amazonaws.com") and not {"SourceArn", "SourceAccount"} & set(props):
                    found.append(f"{template.where(logical_id)}: {props['Principal']} may invoke without SourceArn or SourceAccount")
                continue
            if resource["Type"] not in RESOURCE_POLICIES:
                continue
            for statement in props[RESOURCE_POLICIES[resource["Type"]]]["Statement"]:
                principal = statement.get("Principal")
                if statement.get("Effect") != "Allow" or not isinstance(principal, dict):
                    continue
                keys = {key for operator in statement.get("Condition", {}).values() for key in operator}
                for service in _as_list(principal.get("Service", [])):
                    wanted = RESOURCE_POLICY_KEYS.get(str(service).split(".")[0], SOURCE_KEYS)
                    if not keys & set(wanted):
                        found.append(f"{template.where(logical_id)}: {service} admitted without any of {list(wanted)}")
    return found


@pytest.mark.parametrize("profile", profile_files.available_profiles())
def test_resource_policies_admit_services_only_for_the_kits_resources(profile):
    """Key, topic, queue and bucket policies and Lambda permissions that name a service principal say for which
    source (aws:SourceArn/aws:SourceAccount, https://docs.aws.amazon.com/IAM/latest/UserGuide/confused-deputy.html), or, for
    CloudWatch Logs on a key, which log groups (its documented encryption context)."""
    from tests.fixtures.templates import templates_of

    assert resource_policy_violations(templates_of(profile)) == []


def test_the_resource_policy_rule_fires_on_an_unconditioned_service():
    from tests.fixtures.templates import Template

    policy = {
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage", "Resource": "*"}]
    }
    body = {
        "Resources": {
            "Queue": {"Type": "AWS::SQS::QueuePolicy", "Properties": {"PolicyDocument": policy}},
            "Invoke": {
                "Type": "AWS::Lambda::Permission",
                "Properties": {"Principal": "events.amazonaws.com", "Action": "lambda:InvokeFunction"},
            },
        }
    }
    found = resource_policy_violations([Template("probe", "probe", "probe", body, None)])
    assert len(found) == 2
