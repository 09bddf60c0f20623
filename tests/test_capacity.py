"""GPU capacity on the Capacity Block: each property that makes or breaks a real deployment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_cdk.assertions import Match

from pdkit.model.plan import STACKS
from tests.conftest import policy_findings, synth


def _lt(kit):
    return kit.one("capacity", "AWS::EC2::LaunchTemplate")["LaunchTemplateData"]


def _node_groups(kit):
    return kit.properties("capacity", "AWS::EKS::Nodegroup")


def _efa_group(kit):
    """(its GroupId reference, its properties)."""
    groups = kit.template("capacity").find_resources(
        "AWS::EC2::SecurityGroup", {"Properties": {"GroupDescription": Match.string_like_regexp("^EFA")}}
    )
    ((logical, group),) = groups.items()
    return {"Fn::GetAtt": [logical, "GroupId"]}, group["Properties"]


def test_sixteen_efa_devices_one_per_network_card(kit):
    """p5en exposes 16 EFA devices; fewer interfaces silently halve the fabric, NCCL still 'works'."""
    nics = _lt(kit)["NetworkInterfaces"]
    efa = [n for n in nics if n["InterfaceType"] in ("efa", "efa-only")]
    assert len(efa) == 16
    assert sorted({n["NetworkCardIndex"] for n in nics}) == list(range(16))


def test_exactly_one_interface_carries_ips_and_it_is_the_primary(kit):
    """EFA-only interfaces take no IP; the primary (card 0, device 0) cannot be EFA-only and carries the node's IPs."""
    with_ips = [n for n in _lt(kit)["NetworkInterfaces"] if n["InterfaceType"] == "interface"]
    assert len(with_ips) == 1
    assert (with_ips[0]["NetworkCardIndex"], with_ips[0]["DeviceIndex"]) == (0, 0)


def test_security_groups_per_interface(kit):
    """The primary gets the cluster security group (pod traffic) plus the EFA group; EFA-only interfaces only the EFA group."""
    efa, _ = _efa_group(kit)
    for nic in _lt(kit)["NetworkInterfaces"]:
        if nic["InterfaceType"] == "interface":
            assert len(nic["Groups"]) == 2
            assert efa in nic["Groups"]
            assert any("Fn::GetStackOutput" in g or "Fn::ImportValue" in g for g in nic["Groups"] if g != efa)
        else:
            assert nic["Groups"] == [efa]


def test_no_template_level_security_groups_or_subnet(kit):
    """With interfaces in a launch template, EC2 rejects template-level security groups; EKS rejects a SubnetId."""
    data = _lt(kit)
    assert "SecurityGroupIds" not in data
    assert "SubnetId" not in str(data["NetworkInterfaces"])


def test_imdsv2_required_with_hop_limit_1(kit):
    """Pods are one hop away: hop limit 1 keeps them off the node's instance role (they use Pod Identity)."""
    assert _lt(kit)["MetadataOptions"] == {"HttpEndpoint": "enabled", "HttpPutResponseHopLimit": 1, "HttpTokens": "required"}


def test_capacity_block_market_type_and_reservation_target(kit):
    data = _lt(kit)
    assert data["InstanceMarketOptions"] == {"MarketType": "capacity-block"}
    assert data["CapacityReservationSpecification"] == {"CapacityReservationTarget": {"CapacityReservationId": kit.plan.reservation_id}}


def test_instance_type_lives_in_the_launch_template(kit):
    """Capacity Blocks want it there, and aws-cdk-lib 2.275 rejects P5-family types on NVIDIA node groups."""
    assert _lt(kit)["InstanceType"] == "p5en.48xlarge"
    for group in _node_groups(kit):
        assert "InstanceTypes" not in group


def test_root_volume_encrypted_and_no_ssh_key(kit):
    data = _lt(kit)
    assert data["BlockDeviceMappings"][0]["Ebs"]["Encrypted"] is True
    assert "KeyName" not in data


@pytest.mark.parametrize(
    "parts",
    [
        ("Content-Type: application/node.eks.aws", "kind: NodeConfig", "strategy: RAID0"),
        # EFA pins memory; non-root serving pods inherit containerd's 8 MiB limit unless the node raises it.
        ("Content-Type: text/x-shellscript", "LimitMEMLOCK=infinity"),
    ],
    ids=["nodeadm-raid0-nvme", "containerd-memlock-for-efa"],
)
def test_user_data_parts(kit, parts):
    """nodeadm builds a RAID0 over the instance NVMe; a shell part lifts containerd's locked-memory limit."""
    user_data = _lt(kit)["UserData"]["Fn::Base64"]
    assert all(part in user_data for part in parts)


def test_a_block_launches_with_its_own_placement_by_default(kit):
    """No placement group on a Capacity Block: EC2 places a block's instances together (API_CapacityBlock), AWS
    ParallelCluster refuses a placement group with a Capacity Block at error level (aws/aws-parallelcluster#6311),
    and eksctl#7949 saw one cut a reservation's usable instances, a failure that shows only when the paid block
    starts. b561709 put a cluster placement group on every block."""
    assert kit.plan.market == "capacity-block"
    assert not kit.template("capacity").find_resources("AWS::EC2::PlacementGroup")
    assert "Placement" not in _lt(kit)


def test_a_cluster_placement_group_stays_selectable_on_a_block(raw_with):
    """Asked for explicitly, the block gets one, and the switch changes properties, not which stacks exist."""
    kit = synth(raw_with("capacity.placement_group", "cluster"))
    assert kit.one("capacity", "AWS::EC2::PlacementGroup")["Strategy"] == "cluster"
    assert "GroupName" in _lt(kit)["Placement"]
    assert set(kit.stacks) == set(STACKS)


def test_efa_security_group_allows_all_traffic_to_and_from_itself_only(kit):
    """EFA (SRD) needs every protocol between the GPU nodes; the only peer is the group itself, never a CIDR."""
    t = kit.template("capacity")
    efa, group = _efa_group(kit)
    t.has_resource_properties("AWS::EC2::SecurityGroupIngress", {"IpProtocol": "-1", "SourceSecurityGroupId": efa, "GroupId": efa})
    t.has_resource_properties("AWS::EC2::SecurityGroupEgress", {"IpProtocol": "-1", "DestinationSecurityGroupId": efa, "GroupId": efa})
    assert "SecurityGroupIngress" not in group


def test_one_node_group_per_role_on_the_capacity_block(kit):
    """CAPACITY_BLOCK capacity type and the NVIDIA AMI type; one group per role so each scales and drains alone."""
    groups = {g["NodegroupName"]: g for g in _node_groups(kit)}
    assert set(groups) == {"glm51-2p2d-prefill", "glm51-2p2d-decode"}
    for group in groups.values():
        assert group["CapacityType"] == "CAPACITY_BLOCK"
        assert group["AmiType"] == "AL2023_x86_64_NVIDIA"


def test_desired_size_is_zero_in_the_template_always(kit):
    """Scaling is a run-time act: a redeploy must never shrink a running block (EKS also wants 0 outside the block)."""
    for group in _node_groups(kit):
        assert group["ScalingConfig"] == {"MinSize": 0, "DesiredSize": 0, "MaxSize": 2}


@pytest.mark.parametrize("block_az", ["eu-south-2a", "eu-south-2c"])
def test_gpu_subnets_only_in_the_block_az(raw_with, block_az):
    """Instances of a Capacity Block launch only in its AZ; the non-first AZ rules out a 'first subnet' shortcut."""
    kit = synth(raw_with("aws.availability_zone", block_az))
    network = kit.template_json("network")["Resources"]
    for group in _node_groups(kit):
        (subnet,) = group["Subnets"]
        output = subnet["Fn::GetStackOutput"]["OutputName"] if "Fn::GetStackOutput" in subnet else subnet["Fn::ImportValue"]
        logical = next(k for k in network if k in str(output))
        assert network[logical]["Properties"]["AvailabilityZone"] == block_az


def test_role_labels_and_taints(kit):
    """Only the role's pods land on its nodes; the NVIDIA device plugin schedules by nvidia.com/gpu.present."""
    for group in _node_groups(kit):
        role = group["NodegroupName"].rsplit("-", 1)[1]
        assert group["Labels"] == {"pdkit/role": role, "nvidia.com/gpu.present": "true"}
        assert group["Taints"] == [{"Key": "pdkit/role", "Value": role, "Effect": "NO_SCHEDULE"}]


def test_node_auto_repair_on(kit):
    """A GPU fault inside a paid block is repaired without an operator (its limits: tests/test_node_repair.py)."""
    for group in _node_groups(kit):
        assert group["NodeRepairConfig"]["Enabled"] is True


def test_guard_runs_before_the_node_groups(kit):
    """A node group on a stale reservation retries forever; the guard must fail the deploy first."""
    resources = kit.template_json("capacity")["Resources"]
    (guard,) = [k for k, r in resources.items() if r["Type"] == "Custom::CapacityBlockGuard"]
    assert resources[guard]["Properties"]["ReservationId"] == kit.plan.reservation_id
    assert resources[guard]["Properties"]["InstanceCount"] == "4"
    for logical, r in resources.items():
        if r["Type"] == "AWS::EKS::Nodegroup":
            assert guard in r["DependsOn"], logical


def test_lifecycle_rule_matches_both_event_spellings_for_this_reservation(kit):
    kit.template("capacity").has_resource_properties(
        "AWS::Events::Rule",
        {
            "EventPattern": {
                "source": ["aws.ec2"],
                "detail-type": Match.array_with(
                    ["Capacity Block Delivered", "Capacity Block Reservation Delivered", "Capacity Block Expiration Warning"]
                ),
                "detail": {"capacity-reservation-id": [kit.plan.reservation_id]},
            }
        },
    )


def test_lifecycle_knows_node_groups_sizes_and_lead_from_the_plan(kit):
    functions = kit.template("capacity").find_resources(
        "AWS::Lambda::Function", {"Properties": {"Handler": "pdkit.functions.block_lifecycle.handler"}}
    )
    (fn,) = functions.values()
    env = fn["Properties"]["Environment"]["Variables"]
    assert env["NODE_GROUPS"] == '{"glm51-2p2d-decode": 2, "glm51-2p2d-prefill": 2}'
    assert env["DRAIN_LEAD_MINUTES"] == "60"
    assert env["RESERVATION_ID"] == kit.plan.reservation_id


def test_notifications_topic_is_encrypted(kit):
    """Block lifecycle notices carry reservation ids and times: KMS-encrypted like every other store."""
    kit.template("capacity").has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": Match.any_value()})


def test_every_kit_function_ships_its_own_handler_and_nothing_heavy(kit):
    """Packaged without Docker; each asset holds its own handler module (CDK caches bundles by options, so a
    missing cache key once gave every function the first function's code), and nothing that needs pydantic or CDK."""
    out = Path(kit.assembly.directory)
    seen = 0
    for name in kit.stacks:
        for fn in kit.template(name).find_resources("AWS::Lambda::Function").values():
            handler = fn["Properties"].get("Handler", "")
            if not handler.startswith("pdkit.functions."):
                continue
            seen += 1
            asset = out / ("asset." + fn["Properties"]["Code"]["S3Key"].removesuffix(".zip"))
            files = {str(p.relative_to(asset)) for p in asset.rglob("*.py")}
            assert handler.rsplit(".", 1)[0].replace(".", "/") + ".py" in files, handler
            assert not any(f.startswith(("pdkit/profile", "pdkit/plan", "pdkit/catalog")) for f in files), handler
    assert seen >= 5, "guard, lifecycle, image build starter, block clock, serving metrics"


@pytest.mark.parametrize("devices", [8, 1])
def test_fewer_efa_devices_by_profile(raw_with, devices):
    kit = synth(raw_with("capacity.efa_devices", devices))
    nics = _lt(kit)["NetworkInterfaces"]
    assert len([n for n in nics if n["InterfaceType"] == "efa-only"]) == devices


def test_custom_node_image_switches_the_launch_templates(custom_kit):
    """`ami.source: custom` reads the promoted AMI id from SSM at deploy (the promoted parameter
    /pdkit/<deployment>/ami/gpu, never the build's candidate: only promotion moves nodes) and carries the full nodeadm
    bootstrap (tests/test_ami_node_image.py)."""
    t = custom_kit.template_json("capacity")
    templates = [r["Properties"]["LaunchTemplateData"] for r in t["Resources"].values() if r["Type"] == "AWS::EC2::LaunchTemplate"]
    assert len(templates) == 2, "one per role, so each kubelet registers with its role's taint"
    parameters = t["Parameters"]
    for data in templates:
        (param,) = data["ImageId"].values()
        assert parameters[param]["Type"] == "AWS::SSM::Parameter::Value<AWS::EC2::Image::Id>"
        assert parameters[param]["Default"] == "/pdkit/glm51-2p2d/ami/gpu"
        assert "apiServerEndpoint" in json.dumps(data["UserData"])
        assert "pdkit/role" in json.dumps(data["UserData"])
    for group in _node_groups(custom_kit):
        assert "AmiType" not in group, "EKS refuses an AMI type next to a launch template image id"
        assert group["NodegroupName"].endswith("-custom")


def test_custom_node_image_profile_is_policy_clean(custom_kit):
    assert policy_findings(custom_kit.app) == []


def test_eks_optimized_image_keeps_one_shared_template_and_the_nvidia_ami_type(kit):
    assert len(kit.template("capacity").find_resources("AWS::EC2::LaunchTemplate")) == 1
    assert "ImageId" not in _lt(kit)
