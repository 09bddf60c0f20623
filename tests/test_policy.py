"""Policy packs (AwsSolutions, NIST 800-53 rev5) inside pytest: zero unacknowledged findings."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2

from pdkit.model import profile_files
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
