"""Network stack: one assertion per property an operator relies on."""

from __future__ import annotations

import json
from pathlib import Path

from aws_cdk.assertions import Match

from tests.conftest import synth


def _resources(kit, kind):
    return kit.template("network").find_resources(kind)


def test_vpc_cidr_comes_from_the_profile(kit):
    kit.template("network").has_resource_properties("AWS::EC2::VPC", {"CidrBlock": "10.0.0.0/16"})


def test_private_subnets_in_every_az_of_the_region(kit):
    """A later block may land in another AZ: every AZ already has a private subnet, so the VPC never changes."""
    private = [r for r in _resources(kit, "AWS::EC2::Subnet").values() if _tag(r, "aws-cdk:subnet-type") == "Private"]
    assert sorted(r["Properties"]["AvailabilityZone"] for r in private) == ["eu-south-2a", "eu-south-2b", "eu-south-2c"]


def test_no_subnet_assigns_public_ips(kit):
    """Nodes with several network interfaces cannot take public IPs anyway; nothing else should either."""
    for subnet in _resources(kit, "AWS::EC2::Subnet").values():
        assert subnet["Properties"]["MapPublicIpOnLaunch"] is False


def test_private_subnets_are_tagged_for_internal_load_balancers(kit):
    private = [r for r in _resources(kit, "AWS::EC2::Subnet").values() if _tag(r, "aws-cdk:subnet-type") == "Private"]
    assert all(_tag(r, "kubernetes.io/role/internal-elb") == "1" for r in private)


def test_one_nat_gateway_by_default(kit):
    assert len(_resources(kit, "AWS::EC2::NatGateway")) == kit.plan.network.nat_gateways == 1


def test_endpoints_for_every_aws_service_the_nodes_use(kit):
    """Image pulls, credentials, EKS auth and SSM stay off the NAT gateway."""
    names = set()
    for ep in _resources(kit, "AWS::EC2::VPCEndpoint").values():
        props = ep["Properties"]
        service = props["ServiceName"]["Fn::Join"][1][-1] if isinstance(props["ServiceName"], dict) else props["ServiceName"]
        names.add(service.rsplit(".", 1)[-1] if service.endswith(".s3") else service.split("amazonaws.com.", 1)[-1].lstrip("."))
        if props.get("VpcEndpointType") == "Interface":
            assert props["PrivateDnsEnabled"] is True
    expected = {
        "ecr.api",
        "ecr.dkr",
        "sts",
        "ec2",
        "logs",
        "monitoring",
        "ssm",
        "ssmmessages",
        "ec2messages",
        "eks",
        "eks-auth",
        "aps-workspaces",
        "s3",
    }
    assert {n.split(".", 3)[-1] if n.startswith("com.") else n for n in names} == expected


def test_s3_is_a_gateway_endpoint(kit):
    kit.template("network").has_resource_properties("AWS::EC2::VPCEndpoint", {"VpcEndpointType": "Gateway"})


def test_endpoint_security_group_allows_only_https_from_the_vpc(kit):
    groups = _resources(kit, "AWS::EC2::SecurityGroup")
    assert len(groups) == 1
    (group,) = groups.values()
    assert group["Properties"]["SecurityGroupIngress"] == [
        {"CidrIp": "10.0.0.0/16", "Description": "HTTPS from inside the VPC", "FromPort": 443, "IpProtocol": "tcp", "ToPort": 443}
    ]
    # allow_all_outbound=False renders as a single deny-all placeholder rule.
    assert group["Properties"]["SecurityGroupEgress"][0]["CidrIp"] == "255.255.255.255/32"


def test_flow_logs_capture_all_traffic_into_an_encrypted_log_group(kit):
    t = kit.template("network")
    t.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL", "LogDestinationType": "cloud-watch-logs", "ResourceType": "VPC"})
    # A year by default: Control Tower's CT.CLOUDWATCH.PR.2 refuses less (ct-cloudwatch-pr-2.guard).
    t.has_resource_properties("AWS::Logs::LogGroup", {"KmsKeyId": Match.any_value(), "RetentionInDays": 365})
    t.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_flow_log_role_has_no_inline_policy(kit):
    t = kit.template("network")
    assert not t.find_resources("AWS::IAM::Policy")
    t.has_resource_properties(
        "AWS::IAM::ManagedPolicy",
        {"PolicyDocument": {"Statement": [Match.object_like({"Action": Match.array_with(["logs:PutLogEvents"])})]}},
    )


def test_default_security_group_is_restricted(kit):
    assert len(kit.template("network").find_resources("Custom::VpcRestrictDefaultSG")) == 1


def test_log_data_is_retained_on_stack_deletion(kit):
    for kind in ("AWS::Logs::LogGroup", "AWS::KMS::Key"):
        for res in _resources(kit, kind).values():
            assert res["DeletionPolicy"] == "Retain"


def test_block_in_another_az_does_not_change_the_network(kit, raw_with):
    """Moving the block from eu-south-2a to eu-south-2c must not replace or even modify the VPC."""
    moved = synth(raw_with("aws.availability_zone", "eu-south-2c"))
    assert moved.template_json("network") == kit.template_json("network")


def test_account_in_profile_still_synthesizes_offline(raw_with):
    """With an account the CDK would look up AZs (needs credentials); the plan's AZs make that unnecessary."""
    pinned = synth(raw_with("aws.account", "123456789012"))
    manifest = json.loads((Path(pinned.assembly.directory) / "manifest.json").read_text())
    assert "missing" not in manifest
    subnets = pinned.template("network").find_resources("AWS::EC2::Subnet")
    assert {s["Properties"]["AvailabilityZone"] for s in subnets.values()} == {"eu-south-2a", "eu-south-2b", "eu-south-2c"}


def _tag(resource, key):
    return next((t["Value"] for t in resource["Properties"].get("Tags", []) if t["Key"] == key), None)
