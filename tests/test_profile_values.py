"""Values the profile sets reach the templates: checked with ONE non-default profile, so an implementation that
hard-codes the default (10.0.0.0/16, 365 days, T-60, the block in eu-south-2a, 2 system nodes, 1 NAT gateway,
the deployment name glm51-2p2d, the placeholder reservation cr-00000000000000000, p5en's 16 EFA devices) fails here. The tests named "... from the profile" elsewhere synthesize only the default profile.

One synth for the whole module (each costs ~15 s of CPU): every non-default value sits in NON_DEFAULT.
"""

from __future__ import annotations

import copy
import ipaddress
import json
from typing import Any

import pytest
import yaml

from pdkit.model import profile_files
from tests.conftest import Kit, synth

NAME = "other-pd"
RESERVATION = "cr-0123456789abcdef0"
NON_DEFAULT: dict[str, dict[str, Any]] = {
    # p5e: the same 8 x H200 as p5en, with 32 network cards and EFA devices instead of 16.
    "capacity": {"reservation_id": RESERVATION, "instance_type": "p5e.48xlarge"},
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
    raw["name"] = NAME
    return synth(raw)


def _resources(kit: Kit, stack: str, kind: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in kit.template_json(stack)["Resources"].items() if r["Type"] == kind}


def test_the_profile_really_differs_from_the_default(other, kit):
    """Guards the fixture itself: every value below is not the default's."""
    mine, default = other.plan, kit.plan
    assert mine.network.vpc_cidr != default.network.vpc_cidr
    assert mine.network.flow_log_retention_days != default.network.flow_log_retention_days
    assert mine.log_retention_days != default.log_retention_days
    assert mine.drain_lead_minutes != default.drain_lead_minutes
    assert mine.block_az != default.block_az
    assert mine.system_nodes.count != default.system_nodes.count
    assert mine.network.nat_gateways != default.network.nat_gateways
    assert mine.name != default.name
    assert mine.reservation_id != default.reservation_id
    assert mine.instance.name != default.instance.name


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
        if g["Properties"].get("LogGroupName") == f"/aws/eks/{NAME}/cluster"
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


def _lifecycle_env(kit: Kit) -> dict[str, str]:
    (fn,) = [
        f["Properties"]
        for f in _resources(kit, "capacity", "AWS::Lambda::Function").values()
        if f["Properties"].get("Handler") == "pdkit.functions.block_lifecycle.handler"
    ]
    return dict(fn["Environment"]["Variables"])


def test_the_profiles_reservation_is_targeted_watched_and_drained(other):
    """The launch template's CapacityReservationTarget (EC2 LaunchTemplateData, CapacityReservationSpecification),
    the EventBridge rule's detail.capacity-reservation-id (EC2 Capacity Block events) and the lifecycle function all
    name the profile's block (tests/test_capacity.py checks them only with the placeholder id)."""
    (lt,) = _resources(other, "capacity", "AWS::EC2::LaunchTemplate").values()
    target = lt["Properties"]["LaunchTemplateData"]["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target == {"CapacityReservationId": RESERVATION}
    rules = [r["Properties"].get("EventPattern", {}) for r in _resources(other, "capacity", "AWS::Events::Rule").values()]
    assert [RESERVATION] in [p.get("detail", {}).get("capacity-reservation-id") for p in rules]
    assert _lifecycle_env(other)["RESERVATION_ID"] == RESERVATION


def test_cluster_and_node_group_names_come_from_the_profiles_name(other):
    """AWS::EKS::Cluster Name and the GPU node groups the lifecycle function scales (NODE_GROUPS) carry the
    deployment name (tests/test_capacity.py and tests/test_cluster.py check them only as glm51-2p2d)."""
    (cluster,) = _resources(other, "cluster", "AWS::EKS::Cluster").values()
    assert cluster["Properties"]["Name"] == NAME
    assert json.loads(_lifecycle_env(other)["NODE_GROUPS"]) == {f"{NAME}-decode": 2, f"{NAME}-prefill": 2}
    names = sorted(g["Properties"]["NodegroupName"] for g in _resources(other, "capacity", "AWS::EKS::Nodegroup").values())
    assert names == [f"{NAME}-decode", f"{NAME}-prefill"]


def test_instance_type_and_its_efa_layout_come_from_the_profile(other):
    """The launch template carries the profile's instance type (Capacity Blocks take it there) and one EFA-only
    interface per network card of that type: p5e.48xlarge has 32 (EC2 User Guide, efa-acc-inst-types: primary ENA at
    card 0 device 0, EFA-only at card 0 device 1 and device 0 of every other card); tests/test_capacity.py checks
    only p5en's 16."""
    (lt,) = _resources(other, "capacity", "AWS::EC2::LaunchTemplate").values()
    data = lt["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == "p5e.48xlarge"
    nics = data["NetworkInterfaces"]
    assert len([n for n in nics if n["InterfaceType"] == "efa-only"]) == 32
    assert sorted({n["NetworkCardIndex"] for n in nics}) == list(range(32))
    assert len({(n["NetworkCardIndex"], n["DeviceIndex"]) for n in nics}) == len(nics) == 33
