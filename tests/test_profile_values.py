"""Values the profile sets reach the templates: checked with ONE non-default profile, so an implementation that
hard-codes the default (10.0.0.0/16, 365 days, T-60, the block in eu-south-2a, 2 system nodes, 1 NAT gateway)
fails here. The tests named "... from the profile" elsewhere synthesize only the default profile.

One synth for the whole module (each costs ~15 s of CPU): every non-default value sits in NON_DEFAULT.
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

import pytest
import yaml

from pdkit import profile_files
from tests.conftest import Kit, synth

NON_DEFAULT: dict[str, dict[str, Any]] = {
    "aws": {"availability_zone": "eu-south-2b"},
    "network": {"vpc_cidr": "10.42.0.0/16", "flow_log_retention_days": 90, "nat_gateways": 2},
    "cluster": {"log_retention_days": 30, "system_nodes": {"instance_type": "m7i.4xlarge", "count": 3}},
    "observability": {"block_end_warning_minutes": 75},
}


@pytest.fixture(scope="module")
def other() -> Kit:
    raw = yaml.safe_load(profile_files.resolve(None).read_text())
    for section, values in NON_DEFAULT.items():
        raw.setdefault(section, {}).update(copy.deepcopy(values))
    return synth(raw)


def _resources(kit: Kit, stack: str, kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in kit.template_json(stack)["Resources"].items() if r["Type"] == kind}


def test_the_profile_really_differs_from_the_default(other, kit):
    """Guards the fixture itself: every value below is not the default's."""
    mine, default = other.plan.profile, kit.plan.profile
    assert mine.network.vpc_cidr != default.network.vpc_cidr
    assert mine.network.flow_log_retention_days != default.network.flow_log_retention_days
    assert mine.cluster.log_retention_days != default.cluster.log_retention_days
    assert mine.observability.block_end_warning_minutes != default.observability.block_end_warning_minutes
    assert mine.aws.availability_zone != default.aws.availability_zone
    assert mine.cluster.system_nodes.count != default.cluster.system_nodes.count
    assert mine.network.nat_gateways != default.network.nat_gateways


def test_vpc_and_every_subnet_use_the_profiles_cidr(other):
    """AWS::EC2::VPC CidrBlock and each AWS::EC2::Subnet CidrBlock (which must lie inside the VPC's range)."""
    (vpc,) = _resources(other, "network", "AWS::EC2::VPC").values()
    assert vpc["Properties"]["CidrBlock"] == "10.42.0.0/16"
    net = ipaddress.ip_network("10.42.0.0/16")
    subnets = _resources(other, "network", "AWS::EC2::Subnet").values()
    assert subnets
    assert all(ipaddress.ip_network(s["Properties"]["CidrBlock"]).subnet_of(net) for s in subnets)


def test_flow_log_retention_comes_from_the_profile(other):
    """AWS::Logs::LogGroup RetentionInDays of the VPC flow logs' group."""
    groups = _resources(other, "network", "AWS::Logs::LogGroup").values()
    assert [g["Properties"].get("RetentionInDays") for g in groups] == [90]


def test_control_plane_log_retention_comes_from_the_profile(other):
    """EKS writes control-plane logs to /aws/eks/<cluster>/cluster (EKS User Guide, control-plane logs)."""
    groups = [
        g["Properties"]
        for g in _resources(other, "cluster", "AWS::Logs::LogGroup").values()
        if g["Properties"].get("LogGroupName") == f"/aws/eks/{other.plan.cluster_name}/cluster"
    ]
    assert [g["RetentionInDays"] for g in groups] == [30]


def test_drain_lead_comes_from_the_profile(other):
    """The lifecycle function drains at T-block_end_warning_minutes (EC2 warns at T-40, terminates at T-30)."""
    (fn,) = [
        f["Properties"]
        for f in _resources(other, "capacity", "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == "pdkit.functions.block_lifecycle.handler"
    ]
    assert fn["Environment"]["Variables"]["DRAIN_LEAD_MINUTES"] == "75"


def test_gpu_node_groups_use_only_the_blocks_availability_zone(other):
    """A Capacity Block is in one AZ: the GPU node groups' only subnet is the private subnet of that AZ."""
    network = other.template_json("network")
    az_of_subnet = {k: r["Properties"]["AvailabilityZone"] for k, r in network["Resources"].items() if r["Type"] == "AWS::EC2::Subnet"}
    # The capacity stack reads the subnet through Fn::GetStackOutput of a network stack output that Refs it.
    exported = {name: out["Value"].get("Ref") for name, out in network["Outputs"].items() if isinstance(out["Value"], dict)}
    node_groups = _resources(other, "capacity", "AWS::EKS::Nodegroup").values()
    assert len(node_groups) == 2
    for group in node_groups:
        (subnet,) = group["Properties"]["Subnets"]
        output = subnet["Fn::GetStackOutput"]["OutputName"]
        assert az_of_subnet[exported[output]] == "eu-south-2b"


def test_system_nodes_come_from_the_profile(other):
    """AWS::EKS::Nodegroup InstanceTypes and ScalingConfig of the on-demand system group."""
    (system,) = [
        g["Properties"]
        for g in _resources(other, "cluster", "AWS::EKS::Nodegroup").values()
        if g["Properties"].get("InstanceTypes") == ["m7i.4xlarge"]
    ]
    assert system["ScalingConfig"]["DesiredSize"] == 3


def test_nat_gateways_come_from_the_profile(other):
    assert len(_resources(other, "network", "AWS::EC2::NatGateway")) == 2
